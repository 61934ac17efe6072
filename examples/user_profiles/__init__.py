"""Example service: user profiles by user id, behind a small HTTP JSON API.

Run it with ``python -m examples.user_profiles --state-dir state/ --port 8080``;
see :mod:`examples.user_profiles.api` for the endpoints.
"""
