"""Where a job runs, whether a person must say yes, and when a running one is stopped: the plan
and its digest (plan), the router, the approval rules (policy), usage counting and the kill
rules' judge.

Above the providers (it weighs what they report), below the engine: never imports core.engine
or a front; decisions here are pure functions of the request, the config and the store, so the
same rules judge every door (tests/project/test_import_rules.py: FLOORS).
"""
