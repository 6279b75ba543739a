"""Step "decide": pure decisions from what was observed (benchmark policy, gates, which pod a
run measures, rollout phases)."""
