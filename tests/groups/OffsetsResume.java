// Kafka's own consumer (KafkaConsumer, kafka-clients 4.4.0) commits and resumes against Kelp
// (tests/groups/test_offsets_v10_java.py).
//
// Why: OffsetCommit v10 and OffsetFetch v10 name topics by id, and only a client that speaks them proves the
// broker answers them as Kafka does. This program subscribes to one topic in a group, takes at most `limit`
// records (one line "partition<TAB>offset<TAB>value" each, flushed), commits exactly what it took with
// commitSync (OffsetCommit), reads the commit back with committed() (OffsetFetch) and prints one line
// "#committed<TAB>partition<TAB>offset" per partition, then closes. It stops taking once it has `limit` records
// or nothing came for `quietMs` after the first records (or after `deadlineMs` in all), so every run is bounded.
//
// Run as a single-file source program: java -cp <kafka jars> OffsetsResume.java bootstrap topic group protocol
// limit quietMs deadlineMs   (protocol: classic or consumer, Kafka's group.protocol)

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class OffsetsResume {
    public static void main(String[] args) {
        String bootstrap = args[0], topic = args[1], group = args[2], protocol = args[3];
        int limit = Integer.parseInt(args[4]);
        long quietMs = Long.parseLong(args[5]), deadlineMs = Long.parseLong(args[6]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("group.protocol", protocol);
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("max.poll.records", "5");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(java.util.List.of(topic));
            Map<TopicPartition, OffsetAndMetadata> taken = new HashMap<>();
            long start = System.currentTimeMillis(), last = -1;
            int count = 0;
            while (count < limit && System.currentTimeMillis() - start < deadlineMs
                    && (last < 0 || System.currentTimeMillis() - last < quietMs)) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    if (count == limit) {
                        break;  // the rest of this poll is not taken, and not committed
                    }
                    System.out.println(r.partition() + "\t" + r.offset() + "\t" + r.value());
                    taken.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    count++;
                    last = System.currentTimeMillis();
                }
            }
            System.out.flush();
            consumer.commitSync(taken);
            Set<TopicPartition> parts = consumer.assignment();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : consumer.committed(parts).entrySet()) {
                long offset = e.getValue() == null ? -1 : e.getValue().offset();
                System.out.println("#committed\t" + e.getKey().partition() + "\t" + offset);
            }
            System.out.flush();
        }
    }
}
