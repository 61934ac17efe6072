// A scripted Kafka client for the transaction conformance tests (tests/kafka/txn_scenario.py).
//
// Run as a single-file program on the pinned release's classpath:
//     java -cp <kafka classpath> TxnScript.java <bootstrap servers> < script
// Each line of the script is one step, executed in order, so that the test
// decides exactly how producers interleave in the partition:
//     producer <name> <transactional.id | ->   create a producer ("-": not transactional)
//     begin <name>                              beginTransaction
//     send <name> <topic> <key> <value|NULL>    send one record and wait for its ack
//     commit <name> | abort <name>              commitTransaction / abortTransaction
//     consume <topic> <read_committed|read_uncommitted>
//                                               print "offset<TAB>key<TAB>value" of partition 0
//                                               from the beginning up to the end offset for
//                                               that isolation level (the LSO when committed)
//     close <name>
// Every send waits for its acknowledgement (linger.ms=0, one batch per record),
// so records land in the order of the script.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class TxnScript {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        Map<String, KafkaProducer<String, String>> producers = new HashMap<>();
        Scanner in = new Scanner(System.in);
        while (in.hasNextLine()) {
            String line = in.nextLine().trim();
            if (line.isEmpty()) continue;
            String[] w = line.split(" ");
            switch (w[0]) {
                case "producer": {
                    Properties p = new Properties();
                    p.put("bootstrap.servers", bootstrap);
                    p.put("key.serializer", StringSerializer.class.getName());
                    p.put("value.serializer", StringSerializer.class.getName());
                    p.put("linger.ms", "0");
                    p.put("acks", "all");
                    if (!w[2].equals("-")) {
                        p.put("transactional.id", w[2]);
                    } else {
                        p.put("enable.idempotence", "false");
                    }
                    KafkaProducer<String, String> producer = new KafkaProducer<>(p);
                    if (!w[2].equals("-")) producer.initTransactions();
                    producers.put(w[1], producer);
                    break;
                }
                case "begin": producers.get(w[1]).beginTransaction(); break;
                case "send": {
                    String value = w[4].equals("NULL") ? null : w[4];
                    producers.get(w[1]).send(new ProducerRecord<>(w[2], 0, w[3], value)).get();
                    break;
                }
                case "commit": producers.get(w[1]).commitTransaction(); break;
                case "abort": producers.get(w[1]).abortTransaction(); break;
                case "close": producers.remove(w[1]).close(); break;
                case "consume": consume(bootstrap, w[1], w[2]); break;
                default: throw new IllegalArgumentException("unknown step: " + line);
            }
            System.err.println("done: " + line);
        }
        for (KafkaProducer<String, String> producer : producers.values()) producer.close();
    }

    static void consume(String bootstrap, String topic, String isolation) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("isolation.level", isolation);
        p.put("enable.auto.commit", "false");
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            System.out.println("END\t" + end);
            long deadline = System.currentTimeMillis() + 60_000;
            while (consumer.position(tp) < end) {
                if (System.currentTimeMillis() > deadline) throw new RuntimeException("consume timed out");
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println(r.offset() + "\t" + r.key() + "\t" + (r.value() == null ? "NULL" : r.value()));
                }
            }
        }
        System.out.flush();
    }
}
