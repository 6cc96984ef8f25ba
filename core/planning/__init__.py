"""Where a job runs and whether a person must say yes: plan, router, rules, usage."""
