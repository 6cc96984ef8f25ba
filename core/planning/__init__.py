"""Where a job runs, whether a person must say yes, and when a running one is stopped: plan,
router, policy, usage, the kill rules' judge."""
