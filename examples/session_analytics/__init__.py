"""Session analytics on a session store (docs/time.md): page views grouped into user sessions.

Each view of a user joins the session it falls in (an inactivity gap of
``GAP_MS``), merging sessions it bridges, as a Kafka Streams session-window
aggregation does (:meth:`statestore.SessionStore.merge`).  The aggregate per
session is its number of views.  Each view is committed with the input
position in one transaction, so a restarted consumer continues exactly after
the last commit.

Run ``python -m examples.session_analytics STATE_DIR`` for a small demonstration.
"""
