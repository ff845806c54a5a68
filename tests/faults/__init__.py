"""The fault-injection suite: each case of issue 41's table (non-finite values, concurrent
runs, a full disk, real-world tables and folders, brought-in models) run on tiny models and
tables, asserting that it ends in one clear line or a correct result, never a clean-looking
wrong one."""
