// Kafka's own share consumer (KafkaShareConsumer, kafka-clients 4.x) against Kelp (tests/groups/test_share_clients.py).
//
// Why: the share-group protocol (KIP-932) is only proven against the client users run. This program joins a share
// group with explicit acknowledgement, and for every record it gets prints one line
// "offset<TAB>deliveryCount<TAB>value" to stdout (flushed), then acknowledges it: ACCEPT, or RELEASE when
// release=true and the record is on its first delivery (so the broker must deliver it again, counted twice).
// Acknowledgements are committed with commitSync after each poll ("#committed" is printed once it returns). A line on stdin ("stop") ends the run: the
// consumer closes (its share session ends) and the program exits.
//
// Run as a single-file source program: java -cp <kafka jars> ShareConsume.java bootstrap topic group release
// [max.poll.records] (the most records one ShareFetch acquires: MaxRecords)

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareConsume {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        boolean release = args.length > 3 && Boolean.parseBoolean(args[3]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("share.acknowledgement.mode", "explicit");
        if (args.length > 4) {
            props.put("max.poll.records", args[4]);
        }
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        AtomicBoolean stop = new AtomicBoolean(false);
        Thread reader = new Thread(() -> {
            try {
                System.in.read();
            } catch (Exception e) {
                // stdin closed: stop as well
            }
            stop.set(true);
        });
        reader.setDaemon(true);
        reader.start();
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (!stop.get()) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : records) {
                    short count = r.deliveryCount().orElse((short) -1);
                    System.out.println(r.offset() + "\t" + count + "\t" + r.value());
                    consumer.acknowledge(r, release && count == 1 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                }
                System.out.flush();
                if (!records.isEmpty()) {
                    consumer.commitSync(Duration.ofSeconds(30));
                    System.out.println("#committed");
                    System.out.flush();
                }
            }
        }
        System.out.println("closed");
        System.out.flush();
    }
}
