// The Java client (kafka-clients 4.1) as a group consumer: two members (one thread each)
// subscribe to a 6-partition topic; once both own partitions, TOTAL records are produced and
// must be consumed exactly once across the members (commitSync after each poll); after the
// members close (LeaveGroup) the group is Empty and its committed offsets reach the end.
// Exercises FindCoordinator v4 (batched), JoinGroup v9, SyncGroup v5, Heartbeat v4,
// LeaveGroup v5, OffsetCommit v9, OffsetFetch v9, DescribeGroups v5.
// Usage: java GroupCheck BOOTSTRAP TOPIC GROUP TOTAL ; prints "OK: ..." on success.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.ConsumerGroupState;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class GroupCheck {
    static final int PARTITIONS = 6;

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int total = Integer.parseInt(args[3]);
        ConcurrentHashMap<String, Integer> seen = new ConcurrentHashMap<>();
        List<Set<Integer>> assigned = new ArrayList<>();
        AtomicBoolean stop = new AtomicBoolean(false);
        List<Thread> threads = new ArrayList<>();
        List<Throwable> errors = Collections.synchronizedList(new ArrayList<>());
        for (int i = 0; i < 2; i++) {
            Set<Integer> mine = ConcurrentHashMap.newKeySet();
            assigned.add(mine);
            Thread t = new Thread(() -> {
                Properties cp = new Properties();
                cp.put("bootstrap.servers", bootstrap);
                cp.put("group.id", group);
                cp.put("enable.auto.commit", "false");
                cp.put("auto.offset.reset", "earliest");
                cp.put("session.timeout.ms", "6000");
                cp.put("heartbeat.interval.ms", "1000");
                try (KafkaConsumer<byte[], byte[]> c =
                             new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                    c.subscribe(List.of(topic));
                    while (!stop.get()) {
                        ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(200));
                        Set<Integer> now = new HashSet<>();
                        for (TopicPartition tp : c.assignment()) now.add(tp.partition());
                        mine.retainAll(now);
                        mine.addAll(now);
                        for (ConsumerRecord<byte[], byte[]> r : recs) {
                            seen.merge(r.partition() + "/" + r.offset(), 1, Integer::sum);
                        }
                        if (!recs.isEmpty()) c.commitSync();
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
            });
            t.start();
            threads.add(t);
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (assigned.get(0).isEmpty() || assigned.get(1).isEmpty()
                || assigned.get(0).size() + assigned.get(1).size() != PARTITIONS) {
            check(System.nanoTime() < deadline, "members never split the partitions: " + assigned);
            check(errors.isEmpty(), "consumer failed: " + errors);
            Thread.sleep(100);
        }
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        try (KafkaProducer<byte[], byte[]> p =
                     new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int i = 0; i < total; i++) {
                p.send(new ProducerRecord<>(topic, i % PARTITIONS, null, ("v" + i).getBytes()));
            }
            p.flush();
        }
        while (seen.size() < total) {
            check(System.nanoTime() < deadline, "consumed " + seen.size() + " of " + total);
            check(errors.isEmpty(), "consumer failed: " + errors);
            Thread.sleep(100);
        }
        for (Map.Entry<String, Integer> e : seen.entrySet()) {
            check(e.getValue() == 1, e.getKey() + " consumed " + e.getValue() + " times");
        }
        stop.set(true);
        for (Thread t : threads) t.join(30_000);
        check(errors.isEmpty(), "consumer failed: " + errors);
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(ap)) {
            Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> offsets =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            long sum = 0;
            for (org.apache.kafka.clients.consumer.OffsetAndMetadata o : offsets.values()) sum += o.offset();
            check(sum == total, "committed offsets sum to " + sum + ", not " + total + ": " + offsets);
            ConsumerGroupDescription d =
                    admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get(30, TimeUnit.SECONDS);
            check(d.state() == ConsumerGroupState.EMPTY, "group state after close: " + d.state());
        }
        System.out.println("OK: " + total + " records consumed once by 2 members; offsets committed");
    }
}
