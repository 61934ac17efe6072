"""A one-node KRaft Apache Kafka (broker and controller in one JVM) on 127.0.0.1, for tests.

:class:`KafkaBroker` formats a KRaft storage directory (``kafka-storage format``)
and runs ``kafka.Kafka`` with ``process.roles=broker,controller`` on free ports of
127.0.0.1, in its own process group; :meth:`KafkaBroker.stop` asks for a clean
shutdown (SIGTERM) and kills the process group if that does not finish in time.
Every broker started by this process is also killed at interpreter exit.  It
drives Kafka's own console tools against itself (topic creation, console
producer and consumer).

Threads: not thread-safe; one test (or one CLI call) drives one broker.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from kafka_harness.kafka_runtime import (
    BROKER_JVM_OPTS,
    BROKER_MAIN,
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    NULL_MARKER,
    TOPIC_COMMAND,
    KafkaDist,
    KafkaRuntimeError,
    ToolError,
    kill_process_group,
    new_cluster_id,
)

__all__ = ["KafkaBroker", "free_port", "running_broker"]

_STARTED_MARKER = "Kafka Server started"
"""What ``KafkaRaftServer`` logs once the broker serves requests."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


_LIVE_BROKERS: list[KafkaBroker] = []


def _kill_live_brokers() -> None:
    for broker in list(_LIVE_BROKERS):
        broker.kill()


atexit.register(_kill_live_brokers)


class KafkaBroker:
    """A single-node KRaft broker+controller (``process.roles=broker,controller``) on 127.0.0.1.

    ``work_dir`` holds ``server.properties``, the partition log directory
    (:attr:`log_dir`), the metadata log directory and ``broker.out`` (the broker's
    console log).  The storage is formatted once, on the first :meth:`start`; later
    starts reuse it (new free ports each time), so a test can stop the broker, look
    at its files, and start it again with other broker settings.

    Invariants: at most one broker process per instance; while it runs, it is in
    the module's live list and is killed at interpreter exit if nobody stopped it.
    Not thread-safe.
    """

    def __init__(
        self,
        dist: KafkaDist,
        work_dir: Path,
        *,
        jvm_opts: Sequence[str] = BROKER_JVM_OPTS,
        sasl_users: Mapping[str, str] | None = None,
        ssl_keystore: tuple[Path, str] | None = None,
        mtls_truststore: Path | None = None,
    ) -> None:
        self.dist = dist
        self.sasl_users = dict(sasl_users or {})
        """SASL/PLAIN users (name -> password): if any, a ``SASL_PLAINTEXT`` listener is added
        beside ``PLAINTEXT`` (:attr:`sasl_bootstrap_servers`); the ``PLAINTEXT`` and controller
        listeners keep the ``User:ANONYMOUS`` principal."""
        self.sasl_port = 0
        self.ssl_keystore = ssl_keystore
        """A PKCS12 keystore (path, password) holding the broker's key and certificate: if
        given, an ``SSL`` listener (TLS, no client authentication) is added beside
        ``PLAINTEXT`` (:attr:`ssl_bootstrap_servers`).  With ``sasl_users`` too, a ``SASL_SSL``
        listener (SASL over TLS, the same users and mechanisms) is added as well
        (:attr:`sasl_ssl_bootstrap_servers`)."""
        self.ssl_port = 0
        self.sasl_ssl_port = 0
        self.mtls_truststore = mtls_truststore
        """A PEM file of the certificates (or CAs) of the clients the broker trusts: if given
        (with ``ssl_keystore``), a listener named ``MTLS`` (protocol ``SSL``,
        ``ssl.client.auth=required``) is added (:attr:`mtls_bootstrap_servers`); its
        principal is the client certificate's distinguished name, ``User:CN=...``."""
        self.mtls_port = 0
        self.jvm_opts = tuple(jvm_opts)
        """JVM options of the broker (default: C1 only and a small heap, for short tests)."""
        self.work_dir = work_dir
        self.log_dir = work_dir / "data"
        self.metadata_dir = work_dir / "metadata"
        self.config_file = work_dir / "server.properties"
        self.console_log = work_dir / "broker.out"
        self.port = 0
        self._controller_port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._out: TextIO | None = None
        self._formatted = False

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>`` of the running broker's PLAINTEXT listener."""
        if self._proc is None:
            raise KafkaRuntimeError("the broker is not running")
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>`` of the running broker's ``SASL_PLAINTEXT`` listener."""
        if self._proc is None or not self.sasl_users:
            raise KafkaRuntimeError("the broker is not running with a SASL listener")
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def ssl_bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>`` of the running broker's ``SSL`` listener."""
        if self._proc is None or self.ssl_keystore is None:
            raise KafkaRuntimeError("the broker is not running with an SSL listener")
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>`` of the running broker's ``SASL_SSL`` listener."""
        if self._proc is None or not self.sasl_users or self.ssl_keystore is None:
            raise KafkaRuntimeError("the broker is not running with a SASL_SSL listener")
        return f"127.0.0.1:{self.sasl_ssl_port}"

    @property
    def mtls_bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>`` of the running broker's ``MTLS`` listener (client certificates)."""
        if self._proc is None or self.ssl_keystore is None or self.mtls_truststore is None:
            raise KafkaRuntimeError("the broker is not running with an MTLS listener")
        return f"127.0.0.1:{self.mtls_port}"

    @property
    def pid(self) -> int:
        """The process id of the running broker's JVM (it leads its own process group)."""
        if self._proc is None:
            raise KafkaRuntimeError("the broker is not running")
        return self._proc.pid

    @property
    def running(self) -> bool:
        """Whether the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def _write_config(self, overrides: Mapping[str, str], *, keep_ports: bool = False) -> None:
        if keep_ports and self.port:
            controller_port = self._controller_port
        else:
            self.port = free_port()
            controller_port = free_port()
            while controller_port == self.port:
                controller_port = free_port()
            self._controller_port = controller_port
        settings: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "metadata.log.dir": str(self.metadata_dir),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        }
        taken = {self.port, controller_port}

        def listener(name: str, protocol: str, port: int) -> int:
            """Add listener ``name`` (``protocol``) on ``port`` (a new free one if 0)."""
            if not (keep_ports and port):
                port = free_port()
                while port in taken:
                    port = free_port()
            taken.add(port)
            settings["listeners"] += f",{name}://127.0.0.1:{port}"
            settings["advertised.listeners"] += f",{name}://127.0.0.1:{port}"
            settings["listener.security.protocol.map"] += f",{name}:{protocol}"
            return port

        plain_login = "org.apache.kafka.common.security.plain.PlainLoginModule"
        users = " ".join(f'user_{name}="{secret}"' for name, secret in self.sasl_users.items())
        sasl_listeners = []
        if self.sasl_users:
            self.sasl_port = listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", self.sasl_port)
            sasl_listeners.append("sasl_plaintext")
            settings["sasl.enabled.mechanisms"] = "PLAIN"
        if self.ssl_keystore is not None:
            self.ssl_port = listener("SSL", "SSL", self.ssl_port)
            keystore, password = self.ssl_keystore
            settings["ssl.keystore.type"] = "PKCS12"
            settings["ssl.keystore.location"] = str(keystore)
            settings["ssl.keystore.password"] = password
            settings["ssl.key.password"] = password
            if self.sasl_users:
                self.sasl_ssl_port = listener("SASL_SSL", "SASL_SSL", self.sasl_ssl_port)
                sasl_listeners.append("sasl_ssl")
            if self.mtls_truststore is not None:
                self.mtls_port = listener("MTLS", "SSL", self.mtls_port)
                settings["listener.name.mtls.ssl.client.auth"] = "required"
                settings["listener.name.mtls.ssl.truststore.type"] = "PEM"
                settings["listener.name.mtls.ssl.truststore.location"] = str(self.mtls_truststore)
        for name in sasl_listeners:
            settings[f"listener.name.{name}.plain.sasl.jaas.config"] = (
                f"{plain_login} required {users};"
            )
        settings.update(overrides)
        lines = [f"{key}={value}" for key, value in settings.items()]
        self.config_file.write_text("\n".join(lines) + "\n")

    def start(
        self,
        overrides: Mapping[str, str] | None = None,
        *,
        timeout_s: float = 180,
        attempts: int = 3,
        keep_ports: bool = False,
    ) -> None:
        """Write the configuration (defaults plus ``overrides``), format once, start, wait until up.

        Ports are chosen free just before the start; if another process takes one
        meanwhile (the broker dies with "Address already in use"), the start is
        retried with new ports, up to ``attempts`` times.  ``keep_ports``: listen on
        the ports of the previous start instead (a restart the running clients see
        as the same broker coming back; no retry on other ports).  Raises
        :class:`KafkaRuntimeError` (with the tail of the broker's console log) if the
        broker dies or is not up within ``timeout_s``; the process is killed then.
        """
        for attempt in range(1, attempts + 1):
            try:
                self._start_once(overrides or {}, timeout_s, keep_ports=keep_ports)
            except KafkaRuntimeError as exc:
                if keep_ports or attempt == attempts or "Address already in use" not in str(exc):
                    raise
            else:
                return

    def _start_once(
        self, overrides: Mapping[str, str], timeout_s: float, *, keep_ports: bool = False
    ) -> None:
        if self._proc is not None:
            raise KafkaRuntimeError("the broker is already running")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._write_config(overrides, keep_ports=keep_ports)
        if not self._formatted:
            self.dist.format_storage(self.config_file, new_cluster_id())
            self._formatted = True
        self._out = self.console_log.open("a")
        self._out.write(f"===== start {time.strftime('%H:%M:%S')} =====\n")
        self._out.flush()
        self._proc = subprocess.Popen(
            self.dist.java_argv(
                BROKER_MAIN, [str(self.config_file)], jvm_opts=self.jvm_opts, log4j="broker"
            ),
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _LIVE_BROKERS.append(self)
        try:
            self._wait_started(timeout_s)
        except BaseException:
            self.kill()
            raise

    def _wait_started(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        marker_offset = self._start_offset()
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise KafkaRuntimeError(
                    f"the broker exited with status {self._proc.returncode} while starting:\n"
                    + self.console_tail()
                )
            text = self._read_console(marker_offset)
            if _STARTED_MARKER in text and self._port_open():
                return
            time.sleep(0.1)
        raise KafkaRuntimeError(
            f"the broker did not start in {timeout_s}s:\n" + self.console_tail()
        )

    def _start_offset(self) -> int:
        text = self.console_log.read_bytes()
        return text.rfind(b"===== start ")

    def _read_console(self, offset: int) -> str:
        with self.console_log.open("rb") as f:
            f.seek(max(offset, 0))
            return f.read().decode("utf-8", "replace")

    def _port_open(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def console_tail(self, size: int = 6000) -> str:
        """The last ``size`` characters of the broker's console log (for error messages)."""
        if not self.console_log.exists():
            return "(no console log)"
        return self.console_log.read_bytes()[-size:].decode("utf-8", "replace")

    def stop(self, *, timeout_s: float = 90) -> None:
        """Clean shutdown: SIGTERM (Kafka's shutdown hook flushes, trims indexes, writes
        ``.kafka_cleanshutdown``) and wait; kill the process group after ``timeout_s``.

        Raises :class:`KafkaRuntimeError` if the broker had to be killed or did not
        exit cleanly, because then its files are not those of a clean shutdown.
        """
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise KafkaRuntimeError(
                f"the broker did not shut down in {timeout_s}s and was killed:\n"
                + self.console_tail()
            ) from None
        self._forget()
        if proc.returncode not in (0, 143, -signal.SIGTERM):
            raise KafkaRuntimeError(
                f"the broker exited with status {proc.returncode}:\n" + self.console_tail()
            )

    def kill(self) -> None:
        """SIGKILL the broker's process group (idempotent; used by finalizers)."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            kill_process_group(proc)
        else:
            # The JVM is gone; make sure nothing it spawned lingers in its group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        self._forget()

    def _forget(self) -> None:
        if self in _LIVE_BROKERS:
            _LIVE_BROKERS.remove(self)
        self._proc = None
        if self._out is not None:
            self._out.close()
            self._out = None

    # -- tools against the running broker -------------------------------------------------

    def create_topic(
        self, topic: str, configs: Mapping[str, str], *, timeout_s: float = 120
    ) -> None:
        """``kafka-topics --create`` with one partition, replication factor 1 and ``configs``."""
        args = [
            "--bootstrap-server",
            self.bootstrap_servers,
            "--create",
            "--topic",
            topic,
            "--partitions",
            "1",
            "--replication-factor",
            "1",
        ]
        for key, value in configs.items():
            args += ["--config", f"{key}={value}"]
        self.dist.run_tool(TOPIC_COMMAND, args, timeout_s=timeout_s)

    def produce(
        self,
        topic: str,
        records: Sequence[tuple[str, str | None]],
        *,
        producer_properties: Mapping[str, str] | None = None,
        headers: Sequence[Sequence[tuple[str, str]]] | None = None,
        timeout_s: float = 120,
    ) -> None:
        """``kafka-console-producer`` with ``parse.key=true``: one ``key<TAB>value`` line per record.

        A ``None`` value is sent as a null value (a tombstone) through ``null.marker``.
        Keys and values must not contain tabs or newlines, nor equal :data:`NULL_MARKER`.
        With ``headers`` (one non-empty list of ``(key, value)`` per record; no ``,``
        ``:`` tab or newline in them) the lines start with ``k:v,k2:v2<TAB>``
        (``parse.headers=true``).
        """
        lines = []
        for index, (key, value) in enumerate(records):
            for text in (key, value):
                if text is not None and ("\t" in text or "\n" in text or text == NULL_MARKER):
                    raise ValueError(f"cannot send {text!r} through the console producer")
            prefix = ""
            if headers is not None:
                pairs = headers[index]
                if not pairs or any(set(k + v) & set(",:\t\n") for k, v in pairs):
                    raise ValueError(f"cannot send headers {pairs!r} through the console producer")
                prefix = ",".join(f"{k}:{v}" for k, v in pairs) + "\t"
            lines.append(f"{prefix}{key}\t{NULL_MARKER if value is None else value}\n")
        args = [
            "--bootstrap-server",
            self.bootstrap_servers,
            "--topic",
            topic,
            "--property",
            "parse.key=true",
            "--property",
            "key.separator=\t",
            "--property",
            f"null.marker={NULL_MARKER}",
        ]
        if headers is not None:
            args += ["--property", "parse.headers=true", "--property", "headers.delimiter=\t"]
        for key, value in (producer_properties or {}).items():
            args += ["--producer-property", f"{key}={value}"]
            if key == "compression.type":  # the tool overrides the property with this option
                args += ["--compression-codec", value]
        self.dist.run_tool(CONSOLE_PRODUCER, args, stdin_text="".join(lines), timeout_s=timeout_s)

    def consume(
        self, topic: str, count: int, *, timeout_s: float = 120
    ) -> list[tuple[int, int, str, str | None]]:
        """``kafka-console-consumer --from-beginning --max-messages count`` on partition 0.

        Returns ``(offset, timestamp_ms, key, value)`` per record, in order; a null
        value (tombstone) is ``None``.
        """
        args = [
            "--bootstrap-server",
            self.bootstrap_servers,
            "--topic",
            topic,
            "--partition",
            "0",
            "--offset",
            "earliest",
            "--max-messages",
            str(count),
            "--timeout-ms",
            str(int(timeout_s * 1000 * 0.8)),
            "--property",
            "print.timestamp=true",
            "--property",
            "print.offset=true",
            "--property",
            "print.key=true",
            "--property",
            "print.value=true",
            "--property",
            "key.separator=\t",
            "--property",
            f"null.literal={NULL_MARKER}",
        ]
        result = self.dist.run_tool(CONSOLE_CONSUMER, args, timeout_s=timeout_s)
        out: list[tuple[int, int, str, str | None]] = []
        for line in result.stdout.splitlines():
            if not line.startswith("CreateTime:"):
                continue
            stamp, offset, key, value = line.split("\t")
            out.append(
                (
                    int(offset.removeprefix("Offset:")),
                    int(stamp.removeprefix("CreateTime:")),
                    key,
                    None if value == NULL_MARKER else value,
                )
            )
        if len(out) != count:
            raise ToolError(args, result.returncode, result.stdout, result.stderr)
        return out

    def __enter__(self) -> KafkaBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


@contextlib.contextmanager
def running_broker(
    dist: KafkaDist, work_dir: Path, overrides: Mapping[str, str] | None = None
) -> Iterator[KafkaBroker]:
    """A started broker that is always stopped (killed if need be) when the block ends."""
    broker = KafkaBroker(dist, work_dir)
    try:
        broker.start(overrides)
        yield broker
        broker.stop()
    finally:
        broker.kill()
