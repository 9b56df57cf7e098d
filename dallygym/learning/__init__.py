"""Learned agents: training (PPO, imitation, self-search), the policy networks, and the agent
files that ``evaluate`` loads."""
