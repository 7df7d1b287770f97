// Consume-transform-produce with Kafka's Java client 4.x (transactions v2), one transactional producer bound to each
// consumer group member, members leaving and joining all along
// (tests/transactions/test_group_transact.py, and the rebalancing case of bench/transactions/section.py).
//
// Why: a "group transact session" — consume, produce the transformed records in a transaction, commit the consumed
// offsets in it with the member's group metadata (KIP-447), commit, go on — is how Kafka Streams and most
// exactly-once applications use transactions. Each commit bumps the producer epoch (EndTxn v5) and the next
// transaction's first batches reach the partition leaders while the previous transaction's markers are still being
// written; every rebalance ends a member's transaction and starts another (issue 34). Kafka keeps all of that going;
// a broker answering INVALID_TXN_STATE (or anything else the client treats as fatal) breaks the session.
//
// Run as a single-file source program (`java -cp <kafka-tools jars> GroupTransact.java key=value...`):
//   bootstrap, input, output, group, members (slots), churn.ms (every this often one slot leaves and, half that
//   later, comes back), assignor (range | cooperative-sticky), static (true: group.instance.id per slot),
//   prefix (transactional id prefix: one id per slot, reused by the slot's next member), max.poll.records.
// A slot leaves either cleanly (between transactions: consumer and producer closed) or as a crash (records sent,
// the transaction left open, the producer closed at once: the slot's next member fences it with InitProducerId).
// Every second a JSON status line goes to stdout; "stop" on stdin ends the run (a last line with "final": true).
// Errors are counted by class over each exception's cause chain; "fatal" counts the ones after which the producer
// could not abort (it is replaced), "invalidTxnState" those with an InvalidTxnStateException anywhere in the chain.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.InvalidTxnStateException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class GroupTransact {
    static final Map<String, String> ARGS = new HashMap<>();
    static final Map<String, AtomicLong> ERRORS = new ConcurrentHashMap<>();
    static final AtomicLong COMMITTED_RECORDS = new AtomicLong();
    static final AtomicLong COMMITS = new AtomicLong();
    static final AtomicLong ABORTS = new AtomicLong();
    static final AtomicLong FATAL = new AtomicLong();
    static final AtomicLong INVALID_TXN_STATE = new AtomicLong();
    static final AtomicLong LEAVES = new AtomicLong();
    static final AtomicLong CRASHES = new AtomicLong();
    static final AtomicLong JOINS = new AtomicLong();
    static final AtomicLong REBALANCES = new AtomicLong();
    static final List<String> SAMPLES = new ArrayList<>();

    static String arg(String key, String dflt) {
        return ARGS.getOrDefault(key, dflt);
    }

    static void count(Throwable e) {
        boolean invalidTxnState = false;
        for (Throwable t = e; t != null; t = t.getCause()) {
            ERRORS.computeIfAbsent(t.getClass().getSimpleName(), k -> new AtomicLong()).incrementAndGet();
            invalidTxnState |= t instanceof InvalidTxnStateException;
            if (t.getCause() == t) break;
        }
        if (invalidTxnState) INVALID_TXN_STATE.incrementAndGet();
        synchronized (SAMPLES) {
            if (SAMPLES.size() < 8) {
                StringBuilder chain = new StringBuilder();
                for (Throwable t = e; t != null && t.getCause() != t; t = t.getCause())
                    chain.append(chain.length() == 0 ? "" : " <- ").append(t.getClass().getSimpleName()).append(": ")
                         .append(String.valueOf(t.getMessage()));
                SAMPLES.add(chain.toString());
            }
        }
    }

    static boolean fatal(Throwable e) {
        return e instanceof ProducerFencedException || e instanceof OutOfOrderSequenceException
            || e instanceof AuthorizationException || e instanceof UnsupportedVersionException;
    }

    static String json(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    static synchronized void status(boolean last) {
        StringBuilder errors = new StringBuilder("{");
        for (Map.Entry<String, AtomicLong> e : new TreeMap<>(ERRORS).entrySet())
            errors.append(errors.length() > 1 ? "," : "").append(json(e.getKey())).append(":").append(e.getValue().get());
        errors.append("}");
        StringBuilder samples = new StringBuilder("[");
        synchronized (SAMPLES) {
            for (String s : SAMPLES) samples.append(samples.length() > 1 ? "," : "").append(json(s));
        }
        samples.append("]");
        System.out.println("{\"committedRecords\":" + COMMITTED_RECORDS.get() + ",\"commits\":" + COMMITS.get()
            + ",\"aborts\":" + ABORTS.get() + ",\"fatal\":" + FATAL.get() + ",\"invalidTxnState\":"
            + INVALID_TXN_STATE.get() + ",\"leaves\":" + LEAVES.get() + ",\"crashes\":" + CRASHES.get()
            + ",\"joins\":" + JOINS.get() + ",\"rebalances\":" + REBALANCES.get() + ",\"errors\":" + errors
            + ",\"samples\":" + samples + ",\"final\":" + last + "}");
        System.out.flush();
    }

    /** One group member and its transactional producer; `stop` ends it cleanly, `crash` mid-transaction. */
    static final class Member implements Runnable {
        final int slot;
        volatile boolean stop;
        volatile boolean crash;
        volatile long crashBy;
        KafkaProducer<String, String> producer;
        KafkaConsumer<String, String> consumer;

        Member(int slot) {
            this.slot = slot;
        }

        KafkaProducer<String, String> newProducer() {
            Properties p = new Properties();
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, arg("bootstrap", ""));
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, arg("prefix", "gt") + "-" + slot);
            p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            p.put(ProducerConfig.LINGER_MS_CONFIG, "2");
            p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, arg("transaction.timeout.ms", "20000"));
            p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "60000");
            KafkaProducer<String, String> made = new KafkaProducer<>(p);
            made.initTransactions();
            return made;
        }

        KafkaConsumer<String, String> newConsumer() {
            Properties c = new Properties();
            c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, arg("bootstrap", ""));
            c.put(ConsumerConfig.GROUP_ID_CONFIG, arg("group", "gt"));
            c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, arg("max.poll.records", "20"));
            c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            if (arg("group.protocol", "classic").equals("consumer")) {
                // KIP-848: the broker assigns and times the session; the client may not set those keys
                c.put("group.protocol", "consumer");
            } else {
                c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
                c.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
                String assignor = arg("assignor", "range").equals("cooperative-sticky")
                    ? "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
                    : "org.apache.kafka.clients.consumer.RangeAssignor";
                c.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor);
            }
            if (Boolean.parseBoolean(arg("static", "false")))
                c.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, arg("prefix", "gt") + "-member-" + slot);
            return new KafkaConsumer<>(c);
        }

        void rewind() {
            Set<TopicPartition> assigned = consumer.assignment();
            if (assigned.isEmpty()) return;
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned, Duration.ofSeconds(30));
            for (TopicPartition tp : assigned) {
                OffsetAndMetadata at = committed.get(tp);
                if (at != null) consumer.seek(tp, at.offset());
                else consumer.seekToBeginning(List.of(tp));
            }
        }

        void replaceProducer() {
            try {
                producer.close(Duration.ZERO);
            } catch (RuntimeException ignored) {
                // a producer in a fatal state may refuse even to close cleanly
            }
            producer = newProducer();
        }

        @Override
        public void run() {
            try {
                producer = newProducer();
                consumer = newConsumer();
                consumer.subscribe(List.of(arg("input", "in")), new ConsumerRebalanceListener() {
                    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                        if (!partitions.isEmpty()) REBALANCES.incrementAndGet();
                    }

                    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    }
                });
                JOINS.incrementAndGet();
                String output = arg("output", "out");
                while (!stop) {
                    ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                    if (records.isEmpty()) {
                        if (crash && System.currentTimeMillis() > crashBy) break;  // nothing came to crash in
                        continue;
                    }
                    try {
                        producer.beginTransaction();
                        Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                        for (ConsumerRecord<String, String> r : records) {
                            producer.send(new ProducerRecord<>(output, r.key(), r.value()));
                            next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                        }
                        if (crash) {  // the process "dies" with its transaction open
                            producer.flush();
                            CRASHES.incrementAndGet();
                            producer.close(Duration.ZERO);
                            consumer.close(Duration.ZERO);
                            return;
                        }
                        producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
                        producer.commitTransaction();
                        COMMITS.incrementAndGet();
                        COMMITTED_RECORDS.addAndGet(records.count());
                    } catch (RuntimeException e) {
                        count(e);
                        if (fatal(e)) {
                            FATAL.incrementAndGet();
                            replaceProducer();
                        } else {
                            try {
                                producer.abortTransaction();
                                ABORTS.incrementAndGet();
                            } catch (RuntimeException abortFailed) {
                                count(abortFailed);
                                FATAL.incrementAndGet();
                                replaceProducer();
                            }
                        }
                        rewind();
                    }
                }
                LEAVES.incrementAndGet();
                consumer.close();
                producer.close();
            } catch (RuntimeException e) {
                count(e);
                FATAL.incrementAndGet();
                try {
                    if (consumer != null) consumer.close(Duration.ZERO);
                    if (producer != null) producer.close(Duration.ZERO);
                } catch (RuntimeException ignored) {
                    // counted above
                }
            }
        }
    }

    public static void main(String[] argv) throws Exception {
        for (String a : argv) {
            int eq = a.indexOf('=');
            ARGS.put(a.substring(0, eq), a.substring(eq + 1));
        }
        int slots = Integer.parseInt(arg("members", "10"));
        long churnMs = Long.parseLong(arg("churn.ms", "3000"));
        Member[] members = new Member[slots];
        Thread[] threads = new Thread[slots];
        for (int i = 0; i < slots; i++) {
            members[i] = new Member(i);
            threads[i] = new Thread(members[i], "member-" + i);
            threads[i].start();
        }
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = in.readLine()) != null && !line.trim().equals("stop")) { }
            } catch (Exception ignored) {
                // end of input: stop too
            }
        }, "stdin");
        stdin.start();
        Random random = new Random(34);
        long nextStatus = System.currentTimeMillis() + 1000;
        long nextChurn = System.currentTimeMillis() + churnMs;
        int churns = 0;
        while (stdin.isAlive()) {
            stdin.join(100);
            long now = System.currentTimeMillis();
            if (now >= nextStatus) {
                status(false);
                nextStatus = now + 1000;
            }
            if (churnMs > 0 && now >= nextChurn) {
                int slot = random.nextInt(slots);
                if (churns++ % 2 == 0) {
                    members[slot].crashBy = System.currentTimeMillis() + 2000;
                    members[slot].crash = true;
                }
                else members[slot].stop = true;
                threads[slot].join(90000);
                Thread.sleep(churnMs / 2);
                members[slot] = new Member(slot);
                threads[slot] = new Thread(members[slot], "member-" + slot);
                threads[slot].start();
                nextChurn = System.currentTimeMillis() + churnMs;
            }
        }
        for (Member m : members) m.stop = true;
        for (Thread t : threads) t.join(90000);
        status(true);
        System.exit(0);
    }
}
