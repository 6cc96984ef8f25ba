"""The SkyPilot target kind (issue 43), first step: gpu-router talks to a SkyPilot API server
through an adapter script run in SkyPilot's own venv (adapter.py, client.py, venv.py); gpu-router
never imports `sky`. Not yet a target kind of the registry: planning and `gpu targets add` come
in a later step.
"""
