"""Contract-test kit for rlhooks plugins (see rlhooks.testing.contracts)."""
