"""Writes the fuzz corpus of damaged trace and importer files (tests/data/fuzz/).

Run ``python tests/fuzz_corpus.py`` from the repository root to regenerate it; the output
depends only on this script (a seeded numpy Generator makes the random cases), so running it
twice gives the same bytes.

Every file is a small valid input with one thing wrong (or, for the cases expected to load,
one thing unusual but allowed). ``manifest.json`` lists each file with its format, whether it
is expected to ``load``, be ``refuse``d, or ``either`` (random damage: anything but a crash),
and for refusals the line (and column, or JSON key) the message must name.
tests/test_fuzz_traces.py runs every entry.
"""

from __future__ import annotations

import codecs
import json
import shutil
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "data" / "fuzz"
SEED = 20240601

# ---------------------------------------------------------------------------------------------
# The canonical trace
# ---------------------------------------------------------------------------------------------

COLUMNS = ["job_id", "arrival_s", "num_gpus", "model", "total_iterations", "iter_time_s"]
HEADER = ",".join(COLUMNS)
ROWS = [
    ["0", "0", "1", "resnet50", "100", "0.5"],
    ["1", "10.5", "2", "vgg11", "200", "0.25"],
    ["2", "20", "4", "bert_large", "50", "1.5"],
    ["3", "30", "8", "alexnet", "1000", "0.01"],
]
#: The row the value mutations change: data row 2, on line 4 (the header is line 1).
TARGET, TARGET_LINE = 2, 4
#: Just over the csv module's default field size limit (131,072 characters).
HUGE = 131_073


def csv_text(rows: list[list[str]], header: str = HEADER, end: str = "\n") -> str:
    return end.join([header, *(",".join(r) for r in rows)]) + end


def with_value(column: str, text: str) -> str:
    rows = [list(r) for r in ROWS]
    rows[TARGET][COLUMNS.index(column)] = text
    return csv_text(rows)


# Values written into one field of the target row, and the columns they are valid in. Every
# other column refuses them at the target line, naming that column.
NUMERIC = ("job_id", "arrival_s", "num_gpus", "total_iterations", "iter_time_s")
VALUES: dict[str, tuple[str, tuple[str, ...]]] = {
    "blank": ("", ()),
    "space": ("   ", ()),
    "word": ("abc", ()),
    "digits400": ("9" * 400, ()),
    "exp400": ("1e400", ()),
    "neg_exp400": ("-1e400", ()),
    "nan": ("nan", ()),
    "NaN": ("NaN", ()),
    "inf": ("inf", ()),
    "neg_inf": ("-inf", ()),
    "Infinity": ("Infinity", ()),
    "negative": ("-1", ()),
    "neg_frac": ("-0.5", ()),
    "bool_true": ("True", ()),
    "bool_false": ("false", ()),
    "complex": ("1+2j", ()),
    "complex_j": ("3j", ()),
    "hex": ("0x10", ()),
    "frac": ("1.5", ("arrival_s", "iter_time_s")),
    "padded": (" 5 ", ("job_id", "arrival_s", "num_gpus", "total_iterations", "iter_time_s")),
    "quoted_number": ('"7"', ("job_id", "arrival_s", "num_gpus", "total_iterations", "iter_time_s")),
    "whole_float": ("6.0", ("job_id", "arrival_s", "num_gpus", "total_iterations", "iter_time_s")),
    "plus": ("+9", ("job_id", "arrival_s", "num_gpus", "total_iterations", "iter_time_s")),
    "e20": ("1e20", ()),
    "two_pow_64": ("18446744073709551616", ()),
    "nul": ("5\x00", ()),
    "control": ("\x1b[31m5", ()),
    "unicode_digit": ("\u0665", ()),
    "model_name": ("resnet18", ("model",)),
    "model_upper": ("ResNet50", ()),
    "model_alias": ("resnet-50", ()),
}


def value_cases() -> list[dict]:
    cases = []
    for name, (text, valid_in) in VALUES.items():
        for column in COLUMNS:
            ok = column in valid_in
            cases.append(
                dict(
                    name=f"value_{column}_{name}",
                    text=with_value(column, text),
                    expect="load" if ok else "refuse",
                    line=None if ok else TARGET_LINE,
                    column=None if ok else column,
                )
            )
    # Values only some columns refuse.
    specific = [
        ("job_id", "1", "refuse", TARGET_LINE),  # duplicate of line 3
        ("job_id", "3", "refuse", TARGET_LINE + 1),  # duplicate: named at the later line
        ("job_id", "9007199254740992", "load", None),
        ("job_id", "9007199254740993", "refuse", TARGET_LINE),
        ("arrival_s", "0", "load", None),
        ("arrival_s", "1e9", "load", None),
        ("arrival_s", "1000000000.5", "refuse", TARGET_LINE),
        ("arrival_s", "1e-400", "load", None),  # underflows to 0
        ("num_gpus", "0", "refuse", TARGET_LINE),
        ("num_gpus", "9007199254740992", "load", None),
        ("total_iterations", "0", "refuse", TARGET_LINE),
        ("total_iterations", "2.5", "refuse", TARGET_LINE),
        ("iter_time_s", "0", "refuse", TARGET_LINE),
        ("iter_time_s", "1e-6", "load", None),
        ("iter_time_s", "9.99e-7", "refuse", TARGET_LINE),
        ("iter_time_s", "5e-324", "refuse", TARGET_LINE),
        ("iter_time_s", "1e300", "refuse", TARGET_LINE),
        ("iter_time_s", "2e7", "load", None),  # 50 x 2e7 = 1e9 s, the longest run
        ("iter_time_s", "2.0000001e7", "refuse", TARGET_LINE),
        ("model", "resnet50 ", "refuse", TARGET_LINE),
        ("model", " ", "refuse", TARGET_LINE),
        ("model", "resnet50\x00", "refuse", TARGET_LINE),
        ("model", "x" * 10_000, "refuse", TARGET_LINE),
        ("model", '"vgg11"', "load", None),
        ("model", '"res,net"', "refuse", TARGET_LINE),
    ]
    for i, (column, text, expect, line) in enumerate(specific):
        cases.append(
            dict(
                name=f"edge_{i:02d}_{column}",
                text=with_value(column, text),
                expect=expect,
                line=line,
                column=column if line else None,
            )
        )
    return cases


def structure_cases(rng: np.random.Generator) -> list[dict]:
    good = csv_text(ROWS)
    lines = good.splitlines()
    c: list[dict] = []

    def add(name, data, expect, line=None, column=None, suffix=".csv", words=None):
        c.append(dict(name=name, text=data, expect=expect, line=line, column=column, suffix=suffix, words=words))

    # Allowed variations.
    add("ok_base", good, "load")
    add("ok_crlf", good.replace("\n", "\r\n"), "load")
    add("ok_cr_only", good.replace("\n", "\r"), "load")
    add("ok_mixed_endings", "\r\n".join(lines[:3]) + "\n" + "\n".join(lines[3:]) + "\n", "load")
    add("ok_no_final_newline", good.rstrip("\n"), "load")
    add("ok_trailing_blank_lines", good + "\n\n\n", "load")
    add("ok_utf8_bom", "\ufeff" + good, "load")
    add("ok_utf8_bom_crlf", "\ufeff" + good.replace("\n", "\r\n"), "load")
    add("ok_reordered_columns", csv_text([list(reversed(r)) for r in ROWS], ",".join(reversed(COLUMNS))), "load")
    add("ok_rows_shuffled", csv_text([ROWS[i] for i in (3, 1, 0, 2)]), "load")
    add("ok_single_row", csv_text(ROWS[:1]), "load")
    add(
        "ok_quoted_everything",
        csv_text([[f'"{v}"' for v in r] for r in ROWS], ",".join(f'"{n}"' for n in COLUMNS)),
        "load",
    )
    add("ok_txt_extension", good, "load", suffix=".txt")
    add("ok_no_extension", good, "load", suffix="")
    many = [
        [str(i), str(i * 3.25), str(1 + i % 8), ["resnet50", "vgg11", "alexnet"][i % 3], str(10 + i), "0.125"]
        for i in range(2000)
    ]
    add("ok_2000_rows", csv_text(many), "load")

    # Empty and header-only files.
    add("empty", "", "refuse", 1)
    add("only_newline", "\n", "refuse", 1)
    add("only_blank_lines", "\n\n\n", "refuse", 1)
    add("only_bom", "\ufeff", "refuse", 1)
    add("header_only", HEADER + "\n", "refuse", 2)
    add("header_only_no_newline", HEADER, "refuse", 2)
    add("header_then_blank_lines", HEADER + "\n\n\n", "refuse", 2)
    add("bom_header_only", "\ufeff" + HEADER + "\n", "refuse", 2)

    # Blank lines.
    add("blank_line_before_header", "\n" + good, "refuse", 1)
    add("blank_line_after_header", HEADER + "\n\n" + "\n".join(lines[1:]) + "\n", "refuse", 2)
    add("blank_line_inside", "\n".join(lines[:3]) + "\n\n" + "\n".join(lines[3:]) + "\n", "refuse", 4)
    add("whitespace_line_inside", "\n".join(lines[:3]) + "\n   \n" + "\n".join(lines[3:]) + "\n", "refuse", 4)
    add("comma_only_line_inside", "\n".join(lines[:3]) + "\n,,,,,\n" + "\n".join(lines[3:]) + "\n", "refuse", 4)

    # Field counts.
    add("row_short_one", with_row(lines, TARGET, "2,20,4,bert_large,50"), "refuse", 4, "iter_time_s")
    add("row_short_many", with_row(lines, TARGET, "2,20"), "refuse", 4)
    add("row_single_field", with_row(lines, TARGET, "2"), "refuse", 4)
    add("truncated_mid_row", good[: good.index("bert_large") + 4], "refuse", 4)
    # "0.01" cut to "0." reads as 0.0, an iteration time below the minimum.
    add("truncated_mid_number", good[: good.rindex("0.01") + 2], "refuse", 5, "iter_time_s")
    add("row_extra_field_first", with_row(lines, 0, "0,0,1,resnet50,100,0.5,9"), "refuse", 2)
    add("row_extra_field_later", with_row(lines, TARGET, "2,20,4,bert_large,50,1.5,9"), "refuse", 4)
    add("row_trailing_comma_first", with_row(lines, 0, "0,0,1,resnet50,100,0.5,"), "refuse", 2)
    add("row_trailing_comma_later", with_row(lines, TARGET, "2,20,4,bert_large,50,1.5,"), "refuse", 4)
    add("trailing_comma_everywhere", "\n".join(x + "," for x in lines) + "\n", "refuse", 1)
    add("header_trailing_comma", HEADER + ",\n" + "\n".join(lines[1:]) + "\n", "refuse", 1)
    add("row_1000_fields", with_row(lines, TARGET, ",".join(["1"] * 1000)), "refuse", 4)
    add("semicolons", good.replace(",", ";"), "refuse", 1)
    add("tabs", good.replace(",", "\t"), "refuse", 1)

    # Quotes.
    add("quote_unterminated_mid", with_row(lines, TARGET, '2,20,4,"bert_large,50,1.5'), "refuse", 4)
    add("quote_unterminated_last", with_row(lines, 3, '3,30,8,alexnet,1000,"0.01'), "refuse", 5)
    add("quote_unterminated_header", '"job_id,arrival_s' + good[len("job_id,arrival_s") :], "refuse", 1)
    add("quote_line_break_in_model", with_row(lines, TARGET, '2,20,4,"bert\nlarge",50,1.5'), "refuse", 4, "model")
    add("quote_cr_in_number", with_row(lines, TARGET, '2,20,4,bert_large,"5\r0",1.5'), "refuse", 4, "total_iterations")
    add("quote_stray_in_number", with_row(lines, TARGET, '2,2"0,4,bert_large,50,1.5'), "refuse", 4, "arrival_s")

    # Headers.
    add("missing_column", csv_text([r[:5] for r in ROWS], ",".join(COLUMNS[:5])), "refuse", 1)
    add("extra_column", csv_text([r + ["x"] for r in ROWS], HEADER + ",note"), "refuse", 1)
    add("duplicate_column", csv_text([r + [r[0]] for r in ROWS], HEADER + ",job_id"), "refuse", 1)
    add("duplicate_column_replacing", csv_text(ROWS, HEADER.replace("iter_time_s", "job_id")), "refuse", 1)
    add("header_upper_case", good.replace(HEADER, HEADER.upper()), "refuse", 1)
    add("header_padded", good.replace("num_gpus", " num_gpus "), "refuse", 1)
    add(
        "header_5000_columns",
        csv_text([r + [""] * 5000 for r in ROWS[:1]], HEADER + "".join(f",c{i}" for i in range(5000))),
        "refuse",
        1,
    )
    add("header_control_chars", good.replace("model", "mo\x07del\x1b[2J"), "refuse", 1)
    add("header_nul", good.replace("model", "mo\x00del"), "refuse", 1)
    add("header_is_data", "\n".join(lines[1:]) + "\n", "refuse", 1)
    add("header_huge_field", csv_text(ROWS, HEADER + "," + "h" * HUGE), "refuse", 1)

    # Huge fields (the csv module's limit is 131,072 characters; pandas has none).
    add("huge_model_line2", with_row(lines, 0, "0,0,1," + "m" * HUGE + ",100,0.5"), "refuse", 2)
    add("huge_model_later", with_row(lines, TARGET, "2,20,4," + "m" * HUGE + ",50,1.5"), "refuse", 4, "model")
    add(
        "huge_field_then_long_row",
        "\n".join(
            [lines[0], lines[1], "1,10.5,2," + "m" * HUGE + ",200,0.25", "2,20,4,bert_large,50,1.5,1,2,3", lines[4]]
        )
        + "\n",
        "refuse",
        3,
    )
    add(
        "huge_number",
        with_row(lines, TARGET, "2,20,4,bert_large," + "1" * HUGE + ",1.5"),
        "refuse",
        4,
        "total_iterations",
    )

    # Duplicate ids.
    add("duplicate_id_adjacent", with_row(lines, 1, "0,10.5,2,vgg11,200,0.25"), "refuse", 3, "job_id")
    add("duplicate_id_all", csv_text([["7"] + r[1:] for r in ROWS]), "refuse", 3, "job_id")
    add("duplicate_id_as_float", with_row(lines, 3, "0.0,30,8,alexnet,1000,0.01"), "refuse", 5, "job_id")

    # Encodings.
    add("utf16_le_bom", good.encode("utf-16"), "refuse", 1)
    add("utf16_be_bom", codecs.BOM_UTF16_BE + good.encode("utf-16-be"), "refuse", 1)
    add("utf16_le_no_bom", good.encode("utf-16-le"), "refuse", 1)
    add("utf32_bom", good.encode("utf-32"), "refuse", 1)
    add("latin1_model", good.replace("vgg11", "vgg\u00e911").encode("latin-1"), "refuse", 3, "model")
    add("latin1_header", good.replace("model", "mod\u00e8le").encode("latin-1"), "refuse", 1)
    add("invalid_byte_number", good.encode().replace(b"10.5", b"10\xff5"), "refuse", 3, "arrival_s")
    add("truncated_utf8", good.encode() + b"4,40,1,resnet\xe2\x82", "refuse", 6)
    add("gzip_magic", b"\x1f\x8b\x08\x00" + bytes(rng.integers(0, 256, 200, dtype=np.uint8)), "refuse", 1)
    add("random_binary", bytes(rng.integers(0, 256, 512, dtype=np.uint8)), "refuse", 1)
    add("zip_magic", b"PK\x03\x04" + bytes(20) + b"trace.csv", "refuse", 1)
    add("nul_in_field", with_row(lines, TARGET, "2,20,4,bert_large,5\x000,1.5"), "refuse", 4, "total_iterations")
    add("utf8_model_name", good.replace("vgg11", "vgg\u00e911"), "refuse", 3, "model")
    add("emoji_model_name", good.replace("vgg11", "\U0001f600"), "refuse", 3, "model")
    add("rtl_override_model", good.replace("vgg11", "vgg\u202e11"), "refuse", 3, "model")

    # Other formats given as a trace.
    add("json_content", json.dumps({"jobs": ROWS}), "refuse", 1, suffix=".json")
    add("html_content", "<html><body>404 Not Found</body></html>\n", "refuse", 1, suffix=".csv")
    add("gavel_like_content", "ResNet-50\tcmd\t-n\tFalse\t100\t0\t1\n", "refuse", 1)
    return c


def with_row(lines: list[str], row: int, text: str) -> str:
    out = list(lines)
    out[1 + row] = text
    return "\n".join(out) + "\n"


def random_cases(rng: np.random.Generator, count: int) -> list[dict]:
    """Random damage to the valid trace: byte flips, deletions, insertions, cuts."""
    base = csv_text(ROWS).encode()
    alphabet = np.frombuffer(b'0123456789.,-+e"\n\r \x00\xff\xfeaAnNiI', dtype=np.uint8)
    cases = []
    for i in range(count):
        data = bytearray(base)
        for _ in range(int(rng.integers(1, 6))):
            op = int(rng.integers(0, 4))
            at = int(rng.integers(0, len(data) + 1))
            if op == 0 and at < len(data):
                data[at] = int(rng.choice(alphabet))
            elif op == 1 and at < len(data):
                del data[at]
            elif op == 2:
                data[at:at] = bytes([int(rng.choice(alphabet))])
            else:
                data = data[: max(at, 1)]
        cases.append(dict(name=f"random_{i:03d}", text=bytes(data), expect="either"))
    return cases


# ---------------------------------------------------------------------------------------------
# Importer inputs
# ---------------------------------------------------------------------------------------------

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"
PHILLY_ROWS = [
    ["2017-10-03 10:00:30", "3600", "1", "3600", "11"],
    ["2017-10-03 10:00:00", "90", "2", "180", "11"],
    ["2017-10-03 11:00:00", "45", "8", "360", "2"],
]
TIRESIAS_HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval"
TIRESIAS_ROWS = [
    ["4", "2", "100", "1000", "resnet50", "500", "0"],
    ["1", "8", "0", "200", "vgg16", "1000", "100"],
    ["2", "1", "50", "10", "ResNet-18", "5", "50"],
    ["3", "4", "50.5", "100", "bert-large", "300", "0"],
]
HELIOS_HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"
HELIOS_ROWS = [
    "jA,u1,vc1,8,32,1,COMPLETED,2020-04-01 00:10:00,2020-04-01 00:11:00,2020-04-01 01:11:00,3600,60".split(","),
    "jB,u1,vc1,0,4,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:10:00,600,0".split(","),
    "jF,u3,vc1,4,16,1,COMPLETED,2020-04-01 00:02:00,2020-04-01 00:03:00,2020-04-01 00:13:00,600,60".split(","),
    "jG,u1,vc2,1,2,1,COMPLETED,2020-04-01 00:10:00,2020-04-01 00:10:00,2020-04-01 00:10:45,45,0".split(","),
]
GAVEL_LINES = [
    ["ResNet-50 (batch size 64)", "python3 train.py", "-n", "1", "1000", "0.000000", "1"],
    ["Transformer (batch size 64)", "python3 t.py", "/wd", "-step", "1", "2000", "2", "1", "-1", "30.0"],
    ["A3C", "python3 main.py", "--max-steps", "0", "500", "60.0", "4"],
]
GAVEL_RATES = {"('ResNet-50 (batch size 64)', 1)": 10.0, "('Transformer (batch size 64)', 2)": 8.0, "('A3C', 1)": 5.0}


def gavel_table(rates: dict[str, object] | None = None, extra: dict | None = None) -> str:
    table = {"v100": {k: {"null": r} for k, r in (rates or GAVEL_RATES).items()}}
    table.update(extra or {})
    return json.dumps(table)


def table_csv(
    header: str, rows: list[list[str]], row: int | None = None, column: str | None = None, text: str | None = None
) -> str:
    rows = [list(r) for r in rows]
    if row is not None:
        rows[row][header.split(",").index(column)] = text
    return header + "\n" + "\n".join(",".join(r) for r in rows) + "\n"


def gavel_text(line: int | None = None, field: int | None = None, text: str | None = None) -> str:
    rows = [list(r) for r in GAVEL_LINES]
    if line is not None:
        rows[line][field] = text
    return "\n".join("\t".join(r) for r in rows) + "\n"


# Bad values for the numeric columns of the CSV importers: (name, text).
BAD_NUMBERS = [
    ("blank", ""),
    ("word", "abc"),
    ("digits400", "9" * 400),
    ("exp400", "1e400"),
    ("nan", "nan"),
    ("inf", "inf"),
    ("bool", "True"),
    ("complex", "1+2j"),
    ("nul", "1\x00"),
]


def importer_cases(rng: np.random.Generator) -> list[dict]:
    c: list[dict] = []

    def add(name, fmt, data, expect, line=None, column=None, throughputs=None, suffix=None, words=None):
        c.append(
            dict(
                name=name,
                format=fmt,
                text=data,
                expect=expect,
                line=line,
                column=column,
                throughputs=throughputs,
                words=words,
                suffix=suffix or {"gavel": ".trace", "gavel_throughputs": ".json"}.get(fmt, ".csv"),
            )
        )

    # Philly: row 1 (line 3) is changed.
    add("philly_ok", "philly", table_csv(PHILLY_HEADER, PHILLY_ROWS), "load")
    add("philly_ok_crlf_bom", "philly", "\ufeff" + table_csv(PHILLY_HEADER, PHILLY_ROWS).replace("\n", "\r\n"), "load")
    add(
        "philly_ok_seconds",
        "philly",
        table_csv(PHILLY_HEADER, [["0", "10", "1", "10", "a"], ["-5", "20", "2", "40", "a"]]),
        "load",
    )
    for name, text in BAD_NUMBERS:
        for column in ("duration", "num_gpus"):
            add(
                f"philly_{column}_{name}",
                "philly",
                table_csv(PHILLY_HEADER, PHILLY_ROWS, 1, column, text),
                "refuse",
                3,
                column,
            )
    for column, text, expect in [
        ("duration", "1e300", "refuse"),
        ("duration", "0", "refuse"),
        ("duration", "-1", "refuse"),
        ("duration", "2e9", "refuse"),
        ("num_gpus", "0", "refuse"),
        ("num_gpus", "1.5", "refuse"),
        ("num_gpus", "513", "refuse"),
        ("timestamp", "", "refuse"),
        ("timestamp", "abc", "refuse"),
        ("timestamp", "2017-13-45 99:00:00", "refuse"),
        ("timestamp", "9999-99-99", "refuse"),
        ("timestamp", "t" * 500, "refuse"),
        ("cluster", "", "refuse"),
        ("gpu_time", "abc", "load"),
    ]:
        add(
            f"philly_{column}_{text[:12] or 'blank'}",
            "philly",
            table_csv(PHILLY_HEADER, PHILLY_ROWS, 1, column, text),
            expect,
            3 if expect == "refuse" else None,
            column if expect == "refuse" else None,
        )
    add(
        "philly_timestamps_overflow",
        "philly",
        table_csv(PHILLY_HEADER, [["1e308", "10", "1", "10", "a"], ["-1e308", "10", "1", "10", "a"]]),
        "refuse",
        2,
        "timestamp",
    )
    add(
        "philly_timestamps_far_apart",
        "philly",
        table_csv(PHILLY_HEADER, [["0", "10", "1", "10", "a"], ["2e9", "10", "1", "10", "a"]]),
        "refuse",
        3,
        "timestamp",
    )
    add("philly_missing_duration", "philly", "timestamp,num_gpus\n0,1\n", "refuse", 1)
    add("philly_header_only", "philly", PHILLY_HEADER + "\n", "refuse", 2)
    add("philly_empty", "philly", "", "refuse", 1)
    add("philly_utf16", "philly", table_csv(PHILLY_HEADER, PHILLY_ROWS).encode("utf-16"), "refuse", 1)
    add("philly_unterminated_quote", "philly", table_csv(PHILLY_HEADER, PHILLY_ROWS, 1, "cluster", '"11'), "refuse", 3)
    add("philly_extra_field", "philly", table_csv(PHILLY_HEADER, PHILLY_ROWS, 1, "cluster", "11,x"), "refuse", 3)
    add(
        "philly_duplicate_column",
        "philly",
        table_csv(PHILLY_HEADER + ",duration", [r + ["1"] for r in PHILLY_ROWS]),
        "refuse",
        1,
    )

    # Tiresias: row 2 (line 4) is changed.
    add("tiresias_ok", "tiresias", table_csv(TIRESIAS_HEADER, TIRESIAS_ROWS), "load")
    add(
        "tiresias_ok_unknown_model_drawn",
        "tiresias",
        table_csv(TIRESIAS_HEADER, TIRESIAS_ROWS, 2, "model_name", "NoSuchNet"),
        "load",
    )
    add(
        "tiresias_ok_interval_junk", "tiresias", table_csv(TIRESIAS_HEADER, TIRESIAS_ROWS, 2, "interval", "abc"), "load"
    )
    for name, text in BAD_NUMBERS:
        for column in ("job_id", "num_gpu", "submit_time", "iterations", "duration"):
            add(
                f"tiresias_{column}_{name}",
                "tiresias",
                table_csv(TIRESIAS_HEADER, TIRESIAS_ROWS, 2, column, text),
                "refuse",
                4,
                column,
            )
    for column, text in [
        ("duration", "1e300"),
        ("duration", "1e-12"),
        ("duration", "0"),
        ("submit_time", "1e300"),
        ("submit_time", "-1"),
        ("iterations", "0"),
        ("iterations", "1e20"),
        ("job_id", "1"),
        ("num_gpu", "0"),
        ("model_name", ""),
    ]:
        line = 4
        add(
            f"tiresias_{column}_{text[:12] or 'blank'}",
            "tiresias",
            table_csv(TIRESIAS_HEADER, TIRESIAS_ROWS, 2, column, text),
            "refuse",
            line,
            column,
        )
    add(
        "tiresias_latin1",
        "tiresias",
        table_csv(TIRESIAS_HEADER, TIRESIAS_ROWS, 2, "model_name", "r\u00e9snet").encode("latin-1"),
        "refuse",
        4,
        "model_name",
    )
    # An unknown model name, however long, is drawn from the mix.
    add(
        "tiresias_ok_long_model_name",
        "tiresias",
        table_csv(TIRESIAS_HEADER, TIRESIAS_ROWS, 2, "model_name", "m" * 5000),
        "load",
    )
    add("tiresias_header_only", "tiresias", TIRESIAS_HEADER + "\n", "refuse", 2)

    # Helios: row 2 (jF, line 4) is changed.
    add("helios_ok", "helios", table_csv(HELIOS_HEADER, HELIOS_ROWS), "load")
    # jB has no GPU, so it is dropped and its duration is never read.
    add("helios_ok_gpu_less_row_junk", "helios", table_csv(HELIOS_HEADER, HELIOS_ROWS, 1, "duration", "abc"), "load")
    for name, text in BAD_NUMBERS:
        add(
            f"helios_gpu_num_{name}",
            "helios",
            table_csv(HELIOS_HEADER, HELIOS_ROWS, 2, "gpu_num", text),
            "refuse",
            4,
            "gpu_num",
        )
        add(
            f"helios_duration_{name}",
            "helios",
            table_csv(HELIOS_HEADER, HELIOS_ROWS, 2, "duration", text),
            "refuse",
            4,
            "duration",
        )
    for column, text in [
        ("duration", "1e300"),
        ("submit_time", "abc"),
        ("submit_time", ""),
        ("job_id", "jA"),
        ("gpu_num", "9999"),
    ]:
        add(
            f"helios_{column}_{text[:12] or 'blank'}",
            "helios",
            table_csv(HELIOS_HEADER, HELIOS_ROWS, 2, column, text),
            "refuse",
            4,
            column,
        )
    add(
        "helios_all_dropped",
        "helios",
        table_csv(HELIOS_HEADER, [r[:6] + ["FAILED"] + r[7:] for r in HELIOS_ROWS]),
        "refuse",
        words="no completed GPU job",
    )
    add("helios_utf16", "helios", table_csv(HELIOS_HEADER, HELIOS_ROWS).encode("utf-16-le"), "refuse", 1)

    # Gavel traces (against the good throughput table); line 2 is changed.
    add("gavel_ok", "gavel", gavel_text(), "load")
    add("gavel_ok_crlf", "gavel", gavel_text().replace("\n", "\r\n"), "load")
    fields7 = {"total_steps": 4, "arrival_time": 5, "scale_factor": 6, "job_type": 0}
    for name, text in BAD_NUMBERS:
        for column in ("total_steps", "arrival_time", "scale_factor"):
            add(f"gavel_{column}_{name}", "gavel", gavel_text(2, fields7[column], text), "refuse", 3, column)
    for column, text in [
        ("total_steps", "0"),
        ("total_steps", "1e20"),
        ("arrival_time", "-1"),
        ("arrival_time", "1e300"),
        ("scale_factor", "0"),
        ("scale_factor", "1000"),
        ("job_type", ""),
        ("job_type", "NoSuchJob"),
    ]:
        add(
            f"gavel_{column}_{text[:12] or 'blank'}", "gavel", gavel_text(2, fields7[column], text), "refuse", 3, column
        )
    add("gavel_run_too_long", "gavel", gavel_text(2, 4, "9000000000000000"), "refuse", 3, "total_steps")
    add("gavel_8_fields", "gavel", gavel_text().replace("\t0.000000\t1\n", "\t0.000000\t1\tx\n"), "refuse", 1)
    add("gavel_blank_line", "gavel", gavel_text().replace("\n", "\n\n", 1), "refuse", 2)
    add("gavel_empty", "gavel", "", "refuse", 1)
    add("gavel_utf16", "gavel", gavel_text().encode("utf-16"), "refuse", 1)
    add("gavel_latin1", "gavel", gavel_text(2, 0, "A3\u00c7").encode("latin-1"), "refuse", 3)
    add("gavel_csv_given", "gavel", table_csv(PHILLY_HEADER, PHILLY_ROWS), "refuse", 1)

    # Gavel throughput tables (with the good trace).
    tp = "gavel_throughputs"
    add("throughputs_ok", tp, gavel_table(), "load")
    add("throughputs_ok_bom", tp, "\ufeff" + gavel_table(), "load")
    add("throughputs_worker_array", tp, json.dumps({"v100": [1, 2]}), "refuse", words="worker type v100")
    add("throughputs_worker_string", tp, json.dumps({"v100": "x"}), "refuse", words="worker type v100")
    add("throughputs_worker_null", tp, json.dumps({"v100": None}), "refuse", words="worker type v100")
    add("throughputs_top_array", tp, "[1, 2, 3]", "refuse", words="JSON object")
    add("throughputs_top_number", tp, "42", "refuse", words="JSON object")
    add("throughputs_no_worker", tp, json.dumps({"k80": {}}), "refuse", words="v100")
    add("throughputs_many_workers", tp, json.dumps({f"w{i}": {} for i in range(3000)}), "refuse", words="v100")
    add("throughputs_nested_100k", tp, "[" * 100_000 + "]" * 100_000, "refuse", words="nested")
    add("throughputs_nested_in_worker", tp, '{"v100": ' + "[" * 100_000 + "]" * 100_000 + "}", "refuse", words="nested")
    add("throughputs_empty", tp, "", "refuse", words="line 1")
    add("throughputs_truncated", tp, gavel_table()[:40], "refuse", words="line 1")
    add("throughputs_utf16", tp, gavel_table().encode("utf-16"), "refuse", words="UTF-16")
    add("throughputs_latin1", tp, gavel_table().replace("A3C", "A3\u00c7").encode("latin-1"), "refuse", words="line 1")
    add(
        "throughputs_digits5000", tp, '{"v100": {"(\'A3C\', 1)": {"null": ' + "9" * 5000 + "}}}", "refuse", words="JSON"
    )
    bad_keys = {
        "key_exp400": "('ResNet-50 (batch size 64)', 1e400)",
        "key_scale_zero": "('ResNet-50 (batch size 64)', 0)",
        "key_scale_frac": "('ResNet-50 (batch size 64)', 1.5)",
        "key_scale_text": "('ResNet-50 (batch size 64)', '1')",
        "key_scale_bool": "('ResNet-50 (batch size 64)', True)",
        "key_scale_huge": "('ResNet-50 (batch size 64)', " + "9" * 400 + ")",
        "key_type_int": "(5, 1)",
        "key_three": "('A3C', 1, 2)",
        "key_plain": "A3C",
        "key_code": "__import__('os').system('true')",
        "key_nested": "(" * 5000 + ")" * 5000,
        "key_long": "('" + "x" * 3000 + "', 1)",
    }
    for name, key in bad_keys.items():
        rates = dict(GAVEL_RATES)
        rates[key] = 3.0
        add(f"throughputs_{name}", tp, gavel_table(rates), "refuse", words="key")
    bad_rates = {
        "rate_zero": 0,
        "rate_negative": -1.5,
        "rate_true": True,
        "rate_null": None,
        "rate_string": "10",
        "rate_list": [1, 2],
        "rate_huge_int": 10**400,
    }
    for name, rate in bad_rates.items():
        rates = dict(GAVEL_RATES)
        rates["('A3C', 1)"] = rate
        text = gavel_table(rates)
        add(f"throughputs_{name}", tp, text, "refuse", words="('A3C', 1)")
    for name, literal in [("rate_nan", "NaN"), ("rate_inf", "Infinity"), ("rate_exp400", "1e400")]:
        add(f"throughputs_{name}", tp, gavel_table().replace(": 5.0", ": " + literal), "refuse", words="('A3C', 1)")
    add(
        "throughputs_entry_not_object",
        tp,
        json.dumps({"v100": {"('A3C', 1)": 5.0, **{k: {"null": v} for k, v in GAVEL_RATES.items() if "A3C" not in k}}}),
        "refuse",
        words="('A3C', 1)",
    )
    add(
        "throughputs_entry_no_null",
        tp,
        json.dumps({"v100": {k: {"other": v} for k, v in GAVEL_RATES.items()}}),
        "refuse",
        words="key",
    )
    add("throughputs_tiny_rate", tp, gavel_table({**GAVEL_RATES, "('A3C', 1)": 5e-324}), "refuse", words="line 3")
    add(
        "throughputs_no_rate_for_job",
        tp,
        gavel_table({k: v for k, v in GAVEL_RATES.items() if "A3C" not in k}),
        "refuse",
        words="line 3, column job_type",
    )
    return c


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def write_all(out: Path = OUT) -> dict:
    rng = np.random.default_rng(SEED)
    if out.exists():
        shutil.rmtree(out)
    (out / "traces").mkdir(parents=True)
    (out / "importers").mkdir(parents=True)
    # Git must keep every byte: no line-ending conversion of the CRLF and CR cases.
    (out / ".gitattributes").write_bytes(b"* -text\n")
    manifest: dict = {"seed": SEED, "traces": [], "importers": []}

    trace_cases = value_cases() + structure_cases(rng) + random_cases(rng, 60)
    for case in trace_cases:
        rel = f"traces/{case['name']}{case.get('suffix', '.csv')}"
        _write(out / rel, case["text"])
        manifest["traces"].append(_entry(rel, "canonical", case))
    # Paths that are not files.
    (out / "traces" / "a_directory.csv").mkdir()
    (out / "traces" / "a_directory.csv" / "README").write_text("a directory named like a trace\n")
    manifest["traces"].append(
        dict(
            file="traces/a_directory.csv",
            format="canonical",
            expect="refuse",
            line=None,
            column=None,
            words="is a directory",
        )
    )
    manifest["traces"].append(
        dict(
            file="traces/does_not_exist.csv",
            format="canonical",
            expect="refuse",
            line=None,
            column=None,
            words="no such file",
        )
    )

    for case in importer_cases(rng):
        rel = f"importers/{case['name']}{case['suffix']}"
        _write(out / rel, case["text"])
        entry = _entry(rel, case["format"], case)
        if case["format"] == "gavel":
            entry["throughputs"] = "importers/throughputs_ok.json"
        elif case["format"] == "gavel_throughputs":
            entry["trace"] = "importers/gavel_ok.trace"
        manifest["importers"].append(entry)
    manifest["importers"].append(
        dict(
            file="importers/philly_directory.csv",
            format="philly",
            expect="refuse",
            line=None,
            column=None,
            words="is a directory",
        )
    )
    (out / "importers" / "philly_directory.csv").mkdir()
    (out / "importers" / "philly_directory.csv" / "README").write_text("a directory\n")
    manifest["importers"].append(
        dict(
            file="importers/missing_throughputs.json",
            format="gavel_throughputs",
            expect="refuse",
            line=None,
            column=None,
            words="no such file",
            trace="importers/gavel_ok.trace",
        )
    )
    manifest["importers"].append(
        dict(
            file="importers/missing.trace",
            format="gavel",
            expect="refuse",
            line=None,
            column=None,
            words="no such file",
            throughputs="importers/throughputs_ok.json",
        )
    )
    # One entry a line: small, and a changed case is a one-line diff.
    parts = [f'{{\n "seed": {SEED},']
    for section in ("traces", "importers"):
        entries = ",\n".join("  " + json.dumps(e, ensure_ascii=True) for e in manifest[section])
        parts.append(f' "{section}": [\n{entries}\n ]')
    text = ",\n".join(parts[1:])
    (out / "manifest.json").write_bytes((parts[0] + "\n" + text + "\n}\n").encode("utf-8"))
    return manifest


def _entry(rel: str, fmt: str, case: dict) -> dict:
    return dict(
        file=rel,
        format=fmt,
        expect=case["expect"],
        line=case.get("line"),
        column=case.get("column"),
        words=case.get("words"),
    )


def _write(path: Path, data: str | bytes) -> None:
    # Bytes as given: newline translation or an encoding step would change the damage.
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


if __name__ == "__main__":
    manifest = write_all()
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(
        f"wrote {len(manifest['traces'])} trace cases and {len(manifest['importers'])} "
        f"importer cases to {OUT} ({size / 1e6:.2f} MB)"
    )
