"""Example service: user profiles by user id, an ASGI app (Starlette under uvicorn) on statestore.aio.

Run it with ``python -m examples.user_profiles --state-dir state/ --port 8080``;
see :mod:`examples.user_profiles.app` for the endpoints.
"""
