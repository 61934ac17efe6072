/*
 * The Kafka Streams side of statestore's interop tests (tests/kafka/test_streams_interop.py).
 *
 * One topology over the input topic (String keys, event times as record timestamps), two
 * windowed aggregations of Kafka Streams' default store format:
 *
 *   sessions: groupByKey().windowedBy(SessionWindows gap, grace).count()  -> store "sessions"
 *   counts:   groupByKey().windowedBy(TimeWindows size, grace).count()    -> store "counts"
 *
 * The session aggregation is added first, so for each record it runs before the window count;
 * the window count's updates (caching off: one per record) are counted downstream, so once
 * `expected` of them were seen both stores hold every record.
 *
 * Usage: StreamsApp BOOTSTRAP APP_ID INPUT STATE_DIR EXPECTED USERS WINDOW_MS GAP_MS GRACE_MS
 *
 * Starts, waits until EXPECTED input records are aggregated (0: none, a pure restore), then
 * reads both stores by interactive query (retried while a task is still restoring: Kafka
 * Streams refuses a query of a store that is not running), prints one JSON line per window
 * and per session, closes cleanly (a commit), leaving the group, and prints {"event":"closed"}.
 */

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.InvalidStateStoreException;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlySessionStore;
import org.apache.kafka.streams.state.ReadOnlyWindowStore;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.ValueAndTimestamp;
import org.apache.kafka.streams.state.WindowStore;

public class StreamsApp {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String appId = args[1];
        String input = args[2];
        String stateDir = args[3];
        long expected = Long.parseLong(args[4]);
        int users = Integer.parseInt(args[5]);
        long windowMs = Long.parseLong(args[6]);
        long gapMs = Long.parseLong(args[7]);
        long graceMs = Long.parseLong(args[8]);

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);

        StreamsBuilder builder = new StreamsBuilder();
        AtomicLong aggregated = new AtomicLong();
        KGroupedStream<String, byte[]> grouped = builder
            .stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
            .groupByKey(Grouped.with(Serdes.String(), Serdes.ByteArray()));
        grouped
            .windowedBy(SessionWindows.ofInactivityGapAndGrace(
                Duration.ofMillis(gapMs), Duration.ofMillis(graceMs)))
            .count(Materialized.<String, Long, SessionStore<Bytes, byte[]>>as("sessions"));
        grouped
            .windowedBy(TimeWindows.ofSizeAndGrace(
                Duration.ofMillis(windowMs), Duration.ofMillis(graceMs)))
            .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("counts"))
            .toStream()
            .foreach((key, count) -> aggregated.incrementAndGet());

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        long deadline = System.currentTimeMillis() + 240_000;
        while (streams.state() != KafkaStreams.State.RUNNING || aggregated.get() < expected) {
            if (System.currentTimeMillis() > deadline || streams.state() == KafkaStreams.State.ERROR) {
                System.out.println("{\"event\":\"failed\",\"state\":\"" + streams.state()
                    + "\",\"aggregated\":" + aggregated.get() + "}");
                streams.close(Duration.ofSeconds(30));
                System.exit(1);
            }
            Thread.sleep(50);
        }
        List<String> lines = null;
        while (lines == null) {
            try {
                lines = query(streams, users);
            } catch (InvalidStateStoreException notReady) {  // a task still restoring
                if (System.currentTimeMillis() > deadline) {
                    throw notReady;
                }
                Thread.sleep(100);
            }
        }
        for (String line : lines) {
            System.out.println(line);
        }
        System.out.println("{\"event\":\"queried\",\"aggregated\":" + aggregated.get() + "}");
        // Leave the group at once (Kafka Streams' members stay until the session timeout by
        // default), so the next application of the same group id can join it.
        streams.close(CloseOptions.groupMembershipOperation(
            CloseOptions.GroupMembershipOperation.LEAVE_GROUP).withTimeout(Duration.ofSeconds(60)));
        System.out.println("{\"event\":\"closed\"}");
        System.out.flush();
    }

    static List<String> query(KafkaStreams streams, int users) {
        List<String> lines = new ArrayList<>();
        ReadOnlyWindowStore<String, ValueAndTimestamp<Long>> counts = streams.store(
            StoreQueryParameters.fromNameAndType("counts", QueryableStoreTypes.timestampedWindowStore()));
        try (KeyValueIterator<Windowed<String>, ValueAndTimestamp<Long>> it = counts.all()) {
            while (it.hasNext()) {
                KeyValue<Windowed<String>, ValueAndTimestamp<Long>> next = it.next();
                lines.add(String.format(
                    "{\"store\":\"counts\",\"key\":\"%s\",\"start\":%d,\"value\":%d,\"ts\":%d}",
                    next.key.key(), next.key.window().start(), next.value.value(),
                    next.value.timestamp()));
            }
        }
        ReadOnlySessionStore<String, Long> sessions = streams.store(
            StoreQueryParameters.fromNameAndType("sessions", QueryableStoreTypes.sessionStore()));
        for (int user = 0; user < users; user++) {
            try (KeyValueIterator<Windowed<String>, Long> it = sessions.fetch("u" + user)) {
                while (it.hasNext()) {
                    KeyValue<Windowed<String>, Long> next = it.next();
                    lines.add(String.format(
                        "{\"store\":\"sessions\",\"key\":\"%s\",\"start\":%d,\"end\":%d,\"value\":%d}",
                        next.key.key(), next.key.window().start(), next.key.window().end(),
                        next.value));
                }
            }
        }
        return lines;
    }
}
