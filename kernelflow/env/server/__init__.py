"""The environment server side: the OpenEnv `KernelEnvironment`, its FastAPI app, and a local launcher.

`environment.py` (episodes), `rubric.py` (step reward), `auth.py` (access), `app.py` (the ASGI app and
`serve`), `launch.py` (start a server subprocess for tests and flows). Run it with `kernelflow serve`
or `python -m kernelflow.env.server --host 127.0.0.1 --port 8000 [--config FILE]`.
"""
