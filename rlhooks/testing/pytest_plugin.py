"""pytest plugin (pytest11 entry point) shipping the rlhooks contract-test kit."""
