"""The SkyPilot target kind: gpu-router talks to a SkyPilot API server through an adapter
script run in SkyPilot's own venv (adapter.py, client.py, venv.py; gpu-router never imports
`sky`), prices its clouds (catalog.py), and runs each job's attempt on a cluster of its own
(launching.py, target.py), whose output brings everything home (stream.py).

May import: core.jobs, core.packaging, core.runtime, core.providers' own floor; never the engine.
"""
