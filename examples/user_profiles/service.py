"""User profiles kept in a statestore store: create, read, update, delete, list (asyncio).

A profile is an attrs class (:class:`Profile`) stored under its user id; the
store is declared with ``value_type=Profile`` so it hands back instances.
The service runs on :mod:`statestore.aio`: reads (``get``, ``list``) see the
committed state and never wait for a commit; every mutating call is one
transaction of the store (read, check, write), durable when it returns, so a
profile change the service has acknowledged survives ``kill -9``.  Two
requests that change one profile run their transactions one after the other
(the store's transaction lock): no update is lost, and their commits share
fsyncs.  Deleting a profile writes a tombstone to the changelog.

Thread-safety: call it on the event loop of its :class:`~statestore.aio.AsyncStateManager`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from statestore import SerializationError, TtlSettings
from statestore.aio import AsyncStateManager, AsyncStore, AsyncStoreTransaction

__all__ = [
    "MAX_FIELDS",
    "STORE_NAME",
    "AlreadyExistsError",
    "BadRequestError",
    "NotFoundError",
    "Profile",
    "ProfileError",
    "ProfileService",
    "check_fields",
    "check_user_id",
    "open_profiles",
]

STORE_NAME: Final = "user-profiles"
MAX_FIELDS: Final = 64
_USER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


class ProfileError(Exception):
    """Base class of the service's errors (each maps to one HTTP status)."""

    status = 500


class BadRequestError(ProfileError):
    """The request is malformed (bad user id, field name or value)."""

    status = 400


class NotFoundError(ProfileError):
    """No profile has this user id."""

    status = 404


class AlreadyExistsError(ProfileError):
    """``create`` of a user id that already has a profile."""

    status = 409


@attrs.frozen(kw_only=True)
class Profile:
    """One user's profile: free-form fields plus bookkeeping.

    ``version`` counts the writes to this profile (1 on create);
    ``created_ms``/``updated_ms`` are wall-clock milliseconds.
    """

    user_id: str
    fields: dict[str, Any] = attrs.field(factory=dict)
    version: int = 1
    created_ms: int = 0
    updated_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        """The profile as the API returns it."""
        return {
            "id": self.user_id,
            "fields": self.fields,
            "version": self.version,
            "created_ms": self.created_ms,
            "updated_ms": self.updated_ms,
        }


def check_user_id(user_id: object) -> str:
    """``user_id`` if it is a valid id (1-128 of ``A-Z a-z 0-9 . _ @ -``), else BadRequestError."""
    if not isinstance(user_id, str) or not _USER_ID.match(user_id):
        raise BadRequestError(
            f"invalid user id {user_id!r:.60}: use 1-128 letters, digits, '.', '_', '@' or '-', "
            "starting with a letter or digit"
        )
    return user_id


def check_fields(fields: object, *, allow_null: bool) -> dict[str, Any]:
    """``fields`` as a dict if every name and value is allowed (``None`` only with ``allow_null``:
    a PATCH removing a field), else BadRequestError."""
    if not isinstance(fields, Mapping):
        raise BadRequestError("profile fields must be a JSON object")
    if len(fields) > MAX_FIELDS:
        raise BadRequestError(f"at most {MAX_FIELDS} fields per profile, got {len(fields)}")
    for name, value in fields.items():
        if not isinstance(name, str) or not _FIELD_NAME.match(name):
            raise BadRequestError(
                f"invalid field name {name!r:.60}: use up to 64 letters, digits, '_', '.', '-'"
            )
        if value is None and not allow_null:
            raise BadRequestError(f"field {name!r} is null (use PATCH with null to remove a field)")
    return dict(fields)


async def open_profiles(
    manager: AsyncStateManager, *, inactive_ttl_ms: int | None = None
) -> AsyncStore[str, Profile]:
    """The profile store of ``manager``; with ``inactive_ttl_ms``, a store whose profiles expire.

    A profile not written (created, replaced, updated) for ``inactive_ttl_ms``
    is gone: reads stop returning it at once, and the store's sweep (every
    minute, or the TTL if shorter) and the changelog's cleaner remove it
    (docs/time.md, "TTL").  Reads do not keep a profile alive.  Whether the
    store expires is fixed when it is created: reopening it with another
    setting raises :class:`~statestore.StoreMetadataMismatchError`.
    """
    if inactive_ttl_ms is None:
        return await manager.store(STORE_NAME, value_type=Profile)
    ttl = TtlSettings(ttl_ms=inactive_ttl_ms, sweep_interval_ms=min(60_000, inactive_ttl_ms))
    return await manager.ttl_store(STORE_NAME, ttl=ttl, value_type=Profile)


class ProfileService:
    """Profiles by user id over one async store; each mutating call is durable when it returns."""

    def __init__(
        self, store: AsyncStore[str, Profile], *, clock_ms: Callable[[], int] | None = None
    ) -> None:
        """Serve profiles from ``store`` (declared with ``value_type=Profile``)."""
        self._store = store
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)

    async def get(self, user_id: str) -> Profile:
        """The committed profile of ``user_id``, or NotFoundError."""
        check_user_id(user_id)
        profile = await self._store.get(user_id)
        if profile is None:
            raise NotFoundError(f"no profile for user {user_id!r}")
        return profile

    async def create(self, user_id: str, fields: object) -> Profile:
        """Create a profile; AlreadyExistsError if there is one."""
        check_user_id(user_id)
        checked = check_fields(fields, allow_null=False)
        async with _transaction(self._store) as tx:
            if await tx.get(user_id) is not None:
                raise AlreadyExistsError(f"user {user_id!r} already has a profile")
            now = self._clock_ms()
            profile = Profile(user_id=user_id, fields=checked, created_ms=now, updated_ms=now)
            tx.put(user_id, profile)
        return profile

    async def replace(self, user_id: str, fields: object) -> tuple[Profile, bool]:
        """Create or replace every field; returns the profile and whether it was created."""
        check_user_id(user_id)
        checked = check_fields(fields, allow_null=False)
        async with _transaction(self._store) as tx:
            old = await tx.get(user_id)
            now = self._clock_ms()
            if old is None:
                profile = Profile(user_id=user_id, fields=checked, created_ms=now, updated_ms=now)
            else:
                profile = attrs.evolve(old, fields=checked, version=old.version + 1, updated_ms=now)
            tx.put(user_id, profile)
        return profile, old is None

    async def update(self, user_id: str, changes: object) -> Profile:
        """Merge ``changes`` into the fields (``None`` removes a field); NotFoundError if absent."""
        check_user_id(user_id)
        checked = check_fields(changes, allow_null=True)
        async with _transaction(self._store) as tx:
            old = await tx.get(user_id)
            if old is None:
                raise NotFoundError(f"no profile for user {user_id!r}")
            fields = dict(old.fields)
            for name, value in checked.items():
                if value is None:
                    fields.pop(name, None)
                else:
                    fields[name] = value
            if len(fields) > MAX_FIELDS:
                raise BadRequestError(f"at most {MAX_FIELDS} fields per profile")
            profile = attrs.evolve(
                old, fields=fields, version=old.version + 1, updated_ms=self._clock_ms()
            )
            tx.put(user_id, profile)
        return profile

    async def delete(self, user_id: str) -> None:
        """Delete a profile (a tombstone in the changelog); NotFoundError if absent."""
        check_user_id(user_id)
        async with _transaction(self._store) as tx:
            if await tx.get(user_id) is None:
                raise NotFoundError(f"no profile for user {user_id!r}")
            tx.delete(user_id)

    async def list(
        self, *, prefix: str = "", after: str | None = None, limit: int = 100
    ) -> list[Profile]:
        """Up to ``limit`` committed profiles whose id starts with ``prefix``, in id order, after ``after``.

        A range scan from the first id that can follow ``after`` (``after``
        plus NUL, the next string in UTF-8 byte order), so a page costs what
        it returns, however deep into the listing it is.
        """
        if limit < 1:
            raise BadRequestError(f"limit must be at least 1, got {limit}")
        start = prefix
        if after is not None and after + "\x00" > start:
            start = after + "\x00"
        found: list[Profile] = []
        async for key, profile in self._store.range(start, None):
            if not key.startswith(prefix) or len(found) >= limit:
                break
            found.append(profile)
        return found


class _transaction:  # noqa: N801 - used as ``async with _transaction(store) as tx``
    """The store's transaction, with a value the store cannot keep reported as a bad request."""

    def __init__(self, store: AsyncStore[str, Profile]) -> None:
        self._tx = store.transaction()

    async def __aenter__(self) -> AsyncStoreTransaction[str, Profile]:
        return await self._tx.__aenter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            await self._tx.__aexit__(exc_type, exc, tb)
        except SerializationError as error:
            raise BadRequestError(f"cannot store this profile: {error.reason}") from error
