// The Java client (kafka-clients 4.1) and transactions, one scenario per run:
//   commit-abort  a transactional producer commits and aborts transactions over 5 partitions of
//                 2 topics; read_committed readers never see aborted records or an open
//                 transaction (consumer endOffsets and admin listOffsets answer the LSO while it
//                 is open), read_uncommitted readers see everything
//   ctp           consume-transform-produce with sendOffsetsToTransaction(offsets,
//                 consumer.groupMetadata()) (KIP-447: TxnOffsetCommit v3+ with member id and
//                 generation); the group's offsets stay as they were until the commit, a
//                 require_stable fetch (read_committed consumer's committed(), admin
//                 listConsumerGroupOffsets with requireStable) cannot read them while pending, an aborted round leaves them alone, a stale generation is refused
//                 with CommitFailedException; the output holds every input record once, in order
//   fence         a second producer with the same transactional.id fences the first, whose open
//                 transaction is aborted (the LSO does not hang) and whose commit fails
//   timeout       the coordinator aborts a transaction older than transaction.timeout.ms
//   standalone    sendOffsetsToTransaction for a group no member joined (an assign() consumer's
//                 groupMetadata(): generation -1, no member id; or only a group id), as Kafka
//                 accepts them; the group stays Empty and simple
// Every scenario also prints the producer's transaction version (the client turns KIP-890's
// transaction version 2 on only when the broker finalizes the transaction.version feature at
// 2+); EXPECT_TV=1|2 in the environment makes that a check.
// Usage: java -cp lib/*:build TxnCheck BOOTSTRAP PREFIX SCENARIO [CODEC (commit-abort)].
// Exit 0 and "OK: ..." = passed.

import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.clients.producer.internals.TransactionManager;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.*;
import org.apache.kafka.common.serialization.*;

public final class TxnCheck {
    static final Duration TIMEOUT = Duration.ofSeconds(30);

    static String bootstrap;

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String s(byte[] v) {
        return v == null ? null : new String(v, StandardCharsets.UTF_8);
    }

    static Properties common() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "30000");
        return p;
    }

    static KafkaProducer<byte[], byte[]> txnProducer(String txnId, Map<String, String> extra) {
        Properties p = common();
        p.put("transactional.id", txnId);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("linger.ms", "5");
        p.put("max.block.ms", "30000");
        p.putAll(extra);
        return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
    }

    static KafkaConsumer<byte[], byte[]> consumer(IsolationLevel iso, String group) {
        Properties p = common();
        p.put("isolation.level", iso.toString());
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        if (group != null) {
            p.put("group.id", group);
            p.put("session.timeout.ms", "10000");
            p.put("heartbeat.interval.ms", "1000");
            p.put("max.poll.records", "37");
        }
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    static void createTopics(Admin admin, Map<String, Integer> topics) throws Exception {
        List<NewTopic> nts = new ArrayList<>();
        for (Map.Entry<String, Integer> e : topics.entrySet()) nts.add(new NewTopic(e.getKey(), e.getValue(), (short) 1));
        admin.createTopics(nts).all().get(30, TimeUnit.SECONDS);
    }

    static List<TopicPartition> partitions(String topic, int n) {
        List<TopicPartition> out = new ArrayList<>();
        for (int p = 0; p < n; p++) out.add(new TopicPartition(topic, p));
        return out;
    }

    /** Every record (values per partition, in offset order) from the beginning up to the end
     *  offsets this isolation level answers (the LSO for read_committed, else the high
     *  watermark), and those end offsets. */
    static final class Read {
        final Map<TopicPartition, List<String>> values = new HashMap<>();
        Map<TopicPartition, Long> ends;

        List<String> all() {
            List<String> out = new ArrayList<>();
            for (List<String> v : values.values()) out.addAll(v);
            return out;
        }
    }

    static Read readAll(IsolationLevel iso, List<TopicPartition> tps) {
        Read r = new Read();
        try (KafkaConsumer<byte[], byte[]> c = consumer(iso, null)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            r.ends = c.endOffsets(tps, TIMEOUT);
            for (TopicPartition tp : tps) r.values.put(tp, new ArrayList<>());
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) done &= c.position(tp, TIMEOUT) >= r.ends.get(tp);
                if (done) break;
                check(System.nanoTime() < deadline, iso + " read timed out at " + positions(c, tps) + " of " + r.ends);
                for (ConsumerRecord<byte[], byte[]> rec : c.poll(Duration.ofMillis(200))) {
                    TopicPartition tp = new TopicPartition(rec.topic(), rec.partition());
                    if (rec.offset() < r.ends.get(tp)) r.values.get(tp).add(s(rec.value()));
                }
            }
        }
        return r;
    }

    static Map<TopicPartition, Long> positions(KafkaConsumer<?, ?> c, List<TopicPartition> tps) {
        Map<TopicPartition, Long> out = new HashMap<>();
        for (TopicPartition tp : tps) out.put(tp, c.position(tp, TIMEOUT));
        return out;
    }

    static Map<TopicPartition, Long> adminLatest(Admin admin, List<TopicPartition> tps, IsolationLevel iso) throws Exception {
        Map<TopicPartition, OffsetSpec> q = new HashMap<>();
        for (TopicPartition tp : tps) q.put(tp, OffsetSpec.latest());
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> got =
                admin.listOffsets(q, new ListOffsetsOptions(iso)).all().get(30, TimeUnit.SECONDS);
        Map<TopicPartition, Long> out = new HashMap<>();
        for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e : got.entrySet()) {
            out.put(e.getKey(), e.getValue().offset());
        }
        return out;
    }

    /** The transaction version the producer settled on (after initTransactions/begin), read
     *  from its TransactionManager: the client has no public accessor. */
    static int transactionVersion(KafkaProducer<?, ?> p) throws Exception {
        Field f = KafkaProducer.class.getDeclaredField("transactionManager");
        f.setAccessible(true);
        TransactionManager tm = (TransactionManager) f.get(p);
        return tm.isTransactionV2Enabled() ? 2 : 1;
    }

    static void checkVersion(KafkaProducer<?, ?> p) throws Exception {
        int tv = transactionVersion(p);
        System.out.println("transaction version used by the producer: " + tv);
        String want = System.getenv("EXPECT_TV");
        if (want != null && !want.isEmpty()) check(tv == Integer.parseInt(want), "transaction version " + tv + ", expected " + want);
    }

    static List<String> missing(Collection<String> want, Collection<String> got) {
        List<String> out = new ArrayList<>(want);
        out.removeAll(new HashSet<>(got));
        Collections.sort(out);
        return out;
    }

    // ---------------------------------------------------------------------------------------
    static void commitAbort(String prefix, String codec) throws Exception {
        String ta = prefix + "-a", tb = prefix + "-b";
        List<TopicPartition> tps = new ArrayList<>(partitions(ta, 3));
        tps.addAll(partitions(tb, 2));
        try (Admin admin = Admin.create(common())) {
            createTopics(admin, Map.of(ta, 3, tb, 2));
        }
        Map<TopicPartition, List<String>> committed = new HashMap<>();
        for (TopicPartition tp : tps) committed.put(tp, new ArrayList<>());
        Set<String> aborted = new HashSet<>();
        Map<TopicPartition, List<String>> open = new HashMap<>();
        int txns = 12, perPartition = 4;
        try (KafkaProducer<byte[], byte[]> p = txnProducer(prefix + "-tx", Map.of("compression.type", codec))) {
            p.initTransactions();
            for (int t = 0; t < txns; t++) {
                p.beginTransaction();
                if (t == 0) checkVersion(p);
                Map<TopicPartition, List<String>> sent = new HashMap<>();
                for (int i = 0; i < tps.size(); i++) {
                    // Even transactions span every partition, odd ones every other partition.
                    if (t % 2 == 1 && (i + t) % 2 == 0) continue;
                    TopicPartition tp = tps.get(i);
                    for (int k = 0; k < perPartition; k++) {
                        String v = "t" + t + "/" + tp + "/" + k;
                        p.send(new ProducerRecord<>(tp.topic(), tp.partition(), b("t" + t), b(v)));
                        sent.computeIfAbsent(tp, x -> new ArrayList<>()).add(v);
                    }
                }
                if (t % 3 == 1) {
                    // Flushed first: the client drops batches it has not sent yet on abort,
                    // and the point is aborted data on the log.
                    p.flush();
                    p.abortTransaction();
                    for (List<String> vs : sent.values()) aborted.addAll(vs);
                } else {
                    p.commitTransaction();
                    for (Map.Entry<TopicPartition, List<String>> e : sent.entrySet()) committed.get(e.getKey()).addAll(e.getValue());
                }
            }

            // An open transaction on the first partition of each topic, flushed (on the log).
            p.beginTransaction();
            for (TopicPartition tp : List.of(tps.get(0), tps.get(3))) {
                for (int k = 0; k < perPartition; k++) {
                    String v = "open/" + tp + "/" + k;
                    p.send(new ProducerRecord<>(tp.topic(), tp.partition(), b("open"), b(v)));
                    open.computeIfAbsent(tp, x -> new ArrayList<>()).add(v);
                }
            }
            p.flush();

            Read rc = readAll(IsolationLevel.READ_COMMITTED, tps);
            Read ru = readAll(IsolationLevel.READ_UNCOMMITTED, tps);
            for (TopicPartition tp : tps) {
                check(rc.values.get(tp).equals(committed.get(tp)),
                        "read_committed " + tp + " saw " + rc.values.get(tp) + "\n expected " + committed.get(tp));
                boolean isOpen = open.containsKey(tp);
                check(isOpen ? rc.ends.get(tp) < ru.ends.get(tp) : rc.ends.get(tp).equals(ru.ends.get(tp)),
                        tp + " LSO " + rc.ends.get(tp) + " high watermark " + ru.ends.get(tp) + " open " + isOpen);
            }
            Set<String> want = new HashSet<>(aborted);
            for (List<String> vs : committed.values()) want.addAll(vs);
            for (List<String> vs : open.values()) want.addAll(vs);
            check(new HashSet<>(ru.all()).equals(want) && ru.all().size() == want.size(),
                    "read_uncommitted saw " + ru.all().size() + " records, sent " + want.size() + "; missing "
                            + missing(want, ru.all()) + "; ends " + ru.ends);
            try (Admin admin = Admin.create(common())) {
                Map<TopicPartition, Long> lso = adminLatest(admin, tps, IsolationLevel.READ_COMMITTED);
                Map<TopicPartition, Long> hw = adminLatest(admin, tps, IsolationLevel.READ_UNCOMMITTED);
                check(lso.equals(rc.ends), "admin listOffsets read_committed " + lso + " consumer " + rc.ends);
                check(hw.equals(ru.ends), "admin listOffsets read_uncommitted " + hw + " consumer " + ru.ends);
            }

            p.commitTransaction();
            for (Map.Entry<TopicPartition, List<String>> e : open.entrySet()) committed.get(e.getKey()).addAll(e.getValue());
        }
        Read rc = readAll(IsolationLevel.READ_COMMITTED, tps);
        Read ru = readAll(IsolationLevel.READ_UNCOMMITTED, tps);
        int n = 0;
        for (TopicPartition tp : tps) {
            check(rc.values.get(tp).equals(committed.get(tp)), "after commit read_committed " + tp + " saw " + rc.values.get(tp));
            check(rc.ends.get(tp).equals(ru.ends.get(tp)), tp + " LSO " + rc.ends.get(tp) + " != high watermark " + ru.ends.get(tp));
            n += rc.values.get(tp).size();
        }
        System.out.println("OK: commit-abort: " + n + " committed records read_committed, " + aborted.size()
                + " aborted hidden, " + ru.all().size() + " read_uncommitted, LSO held by the open transaction");
    }

    // ---------------------------------------------------------------------------------------
    static Map<TopicPartition, Long> groupOffsets(Admin admin, String group) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> got =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
        Map<TopicPartition, Long> out = new HashMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : got.entrySet()) {
            if (e.getValue() != null) out.put(e.getKey(), e.getValue().offset());
        }
        return out;
    }

    static void ctp(String prefix) throws Exception {
        String in = prefix + "-in", out = prefix + "-out", group = prefix + "-g";
        int parts = 3, total = 300;
        List<TopicPartition> inTps = partitions(in, parts), outTps = partitions(out, parts);
        Map<TopicPartition, List<String>> input = new HashMap<>();
        try (Admin admin = Admin.create(common())) {
            createTopics(admin, Map.of(in, parts, out, parts));
        }
        Properties pp = common();
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int i = 0; i < total; i++) {
                TopicPartition tp = inTps.get(i % parts);
                p.send(new ProducerRecord<>(in, tp.partition(), null, b("in" + i)));
                input.computeIfAbsent(tp, x -> new ArrayList<>()).add("in" + i);
            }
            p.flush();
        }

        Map<TopicPartition, Long> lastCommitted = new HashMap<>();
        int rounds = 0, abortedRounds = 0, pendingChecks = 0;
        boolean staleChecked = false;
        try (Admin admin = Admin.create(common());
             KafkaConsumer<byte[], byte[]> c = consumer(IsolationLevel.READ_COMMITTED, group);
             KafkaConsumer<byte[], byte[]> stable = consumer(IsolationLevel.READ_COMMITTED, group);
             KafkaProducer<byte[], byte[]> p = txnProducer(prefix + "-ctp", Map.of())) {
            p.initTransactions();
            c.subscribe(List.of(in));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (lastCommitted.values().stream().mapToLong(Long::longValue).sum() < total) {
                check(System.nanoTime() < deadline, "copied only " + lastCommitted + " of " + total);
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(300));
                if (recs.isEmpty()) continue;
                ConsumerGroupMetadata gm = c.groupMetadata();
                check(gm.generationId() > 0 && !gm.memberId().isEmpty(), "group metadata without a member: " + gm);
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                p.beginTransaction();
                if (rounds == 0) checkVersion(p);
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    p.send(new ProducerRecord<>(out, r.partition(), null, b("out:" + s(r.value()))));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }

                if (!staleChecked) {
                    // KIP-447: the group coordinator checks member id and generation; a stale
                    // generation fails the offsets (abortable), the transaction must abort.
                    staleChecked = true;
                    ConsumerGroupMetadata stale = new ConsumerGroupMetadata(gm.groupId(), gm.generationId() + 7,
                            gm.memberId(), gm.groupInstanceId());
                    try {
                        p.sendOffsetsToTransaction(offsets, stale);
                        p.commitTransaction();
                        check(false, "offsets with a stale generation were accepted");
                    } catch (CommitFailedException e) {
                        System.out.println("stale generation refused: " + e.getClass().getSimpleName());
                    }
                    p.abortTransaction();
                    check(groupOffsets(admin, group).equals(lastCommitted), "refused offsets became visible");
                    seekToCommitted(c, lastCommitted);
                    continue;
                }

                p.sendOffsetsToTransaction(offsets, gm);
                p.flush();
                // Pending: a plain fetch still answers the last committed offsets; a
                // require_stable one (the read_committed consumer's committed()) is refused
                // with UNSTABLE_OFFSET_COMMIT, which the client retries until its timeout.
                check(groupOffsets(admin, group).equals(lastCommitted),
                        "pending offsets visible before commit: " + groupOffsets(admin, group) + " vs " + lastCommitted);
                if (pendingChecks < 2) {
                    pendingChecks++;
                    try {
                        Map<TopicPartition, OffsetAndMetadata> got = stable.committed(offsets.keySet(), Duration.ofSeconds(2));
                        check(false, "require_stable fetch answered while a commit is pending: " + got);
                    } catch (org.apache.kafka.common.errors.TimeoutException e) {
                        // expected: UNSTABLE_OFFSET_COMMIT retried until the deadline
                    }
                    // The admin client leaves out the partitions answered UNSTABLE_OFFSET_COMMIT
                    // (as against Kafka 4.1) rather than retrying.
                    Map<TopicPartition, OffsetAndMetadata> got = admin.listConsumerGroupOffsets(group,
                                    new ListConsumerGroupOffsetsOptions().requireStable(true))
                            .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
                    for (TopicPartition tp : offsets.keySet()) {
                        check(got.get(tp) == null, "admin require_stable fetch answered " + tp + " while its commit is pending: " + got);
                    }
                }
                rounds++;
                if (rounds % 4 == 2) {
                    p.abortTransaction();
                    abortedRounds++;
                    check(groupOffsets(admin, group).equals(lastCommitted), "aborted offsets became visible");
                    seekToCommitted(c, lastCommitted);
                    continue;
                }
                p.commitTransaction();
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) lastCommitted.put(e.getKey(), e.getValue().offset());
                // After the commit the stable fetch answers (once the markers are written).
                Map<TopicPartition, OffsetAndMetadata> got = stable.committed(offsets.keySet(), TIMEOUT);
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                    check(got.get(e.getKey()) != null && got.get(e.getKey()).offset() == e.getValue().offset(),
                            "committed " + e + " but stable fetch answers " + got.get(e.getKey()));
                }
                check(groupOffsets(admin, group).equals(lastCommitted), "admin offsets " + groupOffsets(admin, group) + " vs " + lastCommitted);
                Map<TopicPartition, OffsetAndMetadata> stableAdmin = admin.listConsumerGroupOffsets(group,
                                new ListConsumerGroupOffsetsOptions().requireStable(true))
                        .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
                for (Map.Entry<TopicPartition, Long> e : lastCommitted.entrySet()) {
                    check(stableAdmin.get(e.getKey()) != null && stableAdmin.get(e.getKey()).offset() == e.getValue(),
                            "admin require_stable after commit: " + stableAdmin + " vs " + lastCommitted);
                }
            }
        }
        check(abortedRounds > 0, "no round was aborted");
        Read rc = readAll(IsolationLevel.READ_COMMITTED, outTps);
        Read ru = readAll(IsolationLevel.READ_UNCOMMITTED, outTps);
        for (int i = 0; i < parts; i++) {
            List<String> want = new ArrayList<>();
            for (String v : input.get(inTps.get(i))) want.add("out:" + v);
            check(rc.values.get(outTps.get(i)).equals(want), "output " + outTps.get(i) + " is " + rc.values.get(outTps.get(i)));
        }
        check(ru.all().size() > total, "read_uncommitted should also see the aborted copies: " + ru.all().size());
        System.out.println("OK: ctp: " + total + " records copied exactly once in " + rounds + " rounds ("
                + abortedRounds + " aborted); " + ru.all().size() + " read_uncommitted");
    }

    static void seekToCommitted(KafkaConsumer<byte[], byte[]> c, Map<TopicPartition, Long> committed) {
        for (TopicPartition tp : c.assignment()) {
            Long o = committed.get(tp);
            if (o == null) c.seekToBeginning(List.of(tp));
            else c.seek(tp, o);
        }
    }

    // ---------------------------------------------------------------------------------------
    static void fence(String prefix) throws Exception {
        String topic = prefix + "-f";
        List<TopicPartition> tps = partitions(topic, 2);
        try (Admin admin = Admin.create(common())) {
            createTopics(admin, Map.of(topic, 2));
        }
        String txnId = prefix + "-fence";
        String fencedBy = "";
        try (KafkaProducer<byte[], byte[]> first = txnProducer(txnId, Map.of())) {
            first.initTransactions();
            first.beginTransaction();
            checkVersion(first);
            for (TopicPartition tp : tps) first.send(new ProducerRecord<>(topic, tp.partition(), null, b("first/" + tp)));
            first.commitTransaction();
            first.beginTransaction();
            for (TopicPartition tp : tps) first.send(new ProducerRecord<>(topic, tp.partition(), null, b("zombie/" + tp)));
            first.flush();

            try (KafkaProducer<byte[], byte[]> second = txnProducer(txnId, Map.of())) {
                // Fences `first` and aborts its open transaction.
                second.initTransactions();
                Read rc = readAll(IsolationLevel.READ_COMMITTED, tps);
                Read ru = readAll(IsolationLevel.READ_UNCOMMITTED, tps);
                for (TopicPartition tp : tps) {
                    check(rc.ends.get(tp).equals(ru.ends.get(tp)), tp + " LSO " + rc.ends.get(tp)
                            + " hangs below the high watermark " + ru.ends.get(tp) + " after fencing");
                    check(rc.values.get(tp).equals(List.of("first/" + tp)), "read_committed " + tp + " " + rc.values.get(tp));
                    check(ru.values.get(tp).equals(List.of("first/" + tp, "zombie/" + tp)), "read_uncommitted " + tp + " " + ru.values.get(tp));
                }

                try {
                    first.send(new ProducerRecord<>(topic, 0, null, b("zombie-late"))).get(30, TimeUnit.SECONDS);
                    first.commitTransaction();
                    check(false, "the fenced producer committed");
                } catch (Exception e) {
                    Throwable cause = e instanceof java.util.concurrent.ExecutionException ? e.getCause() : e;
                    fencedBy = cause.getClass().getSimpleName();
                    check(cause instanceof ProducerFencedException || cause instanceof InvalidProducerEpochException
                            || cause instanceof FencedInstanceIdException,
                            "fenced producer failed with " + cause);
                }
                second.beginTransaction();
                for (TopicPartition tp : tps) second.send(new ProducerRecord<>(topic, tp.partition(), null, b("second/" + tp)));
                second.commitTransaction();
            }
        }
        Read rc = readAll(IsolationLevel.READ_COMMITTED, tps);
        Read ru = readAll(IsolationLevel.READ_UNCOMMITTED, tps);
        for (TopicPartition tp : tps) {
            check(rc.values.get(tp).equals(List.of("first/" + tp, "second/" + tp)), "read_committed " + tp + " " + rc.values.get(tp));
            check(rc.ends.get(tp).equals(ru.ends.get(tp)), tp + " LSO " + rc.ends.get(tp) + " HW " + ru.ends.get(tp));
            check(!ru.values.get(tp).contains("zombie-late"), "the fenced producer's late send was written: " + ru.values.get(tp));
        }
        System.out.println("OK: fence: the second producer fenced the first (" + fencedBy
                + "), whose open transaction was aborted; the second committed");
    }

    // ---------------------------------------------------------------------------------------
    static void timeout(String prefix) throws Exception {
        String topic = prefix + "-t";
        List<TopicPartition> tps = partitions(topic, 1);
        try (Admin admin = Admin.create(common())) {
            createTopics(admin, Map.of(topic, 1));
        }
        String failedWith = "";
        try (KafkaProducer<byte[], byte[]> p = txnProducer(prefix + "-timeout", Map.of("transaction.timeout.ms", "3000"))) {
            p.initTransactions();
            p.beginTransaction();
            checkVersion(p);
            p.send(new ProducerRecord<>(topic, 0, null, b("expires")));
            p.flush();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (true) {
                Read rc = readAll(IsolationLevel.READ_COMMITTED, tps);
                Read ru = readAll(IsolationLevel.READ_UNCOMMITTED, tps);
                if (rc.ends.equals(ru.ends)) {
                    check(rc.values.get(tps.get(0)).isEmpty(), "the expired transaction was committed: " + rc.values);
                    break;
                }
                check(System.nanoTime() < deadline, "the coordinator never aborted the expired transaction");
                Thread.sleep(500);
            }
            try {
                p.commitTransaction();
                check(false, "committed a transaction the coordinator aborted");
            } catch (KafkaException e) {
                failedWith = e.getClass().getSimpleName();
            }
        }
        System.out.println("OK: timeout: the coordinator aborted the expired transaction; commit failed with " + failedWith);
    }

    // ---------------------------------------------------------------------------------------
    static void standalone(String prefix) throws Exception {
        String topic = prefix + "-s", group = prefix + "-sg";
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = Admin.create(common())) {
            createTopics(admin, Map.of(topic, 1));
            try (KafkaConsumer<byte[], byte[]> c = consumer(IsolationLevel.READ_COMMITTED, group);
                 KafkaProducer<byte[], byte[]> p = txnProducer(prefix + "-stx", Map.of())) {
                c.assign(List.of(tp));
                ConsumerGroupMetadata gm = c.groupMetadata();
                check(gm.generationId() == -1 && gm.memberId().isEmpty(), "an assign() consumer's group metadata: " + gm);
                p.initTransactions();
                p.beginTransaction();
                checkVersion(p);
                p.send(new ProducerRecord<>(topic, 0, null, b("x")));
                p.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(5)), gm);
                p.commitTransaction();
                OffsetAndMetadata got = c.committed(Set.of(tp), TIMEOUT).get(tp);
                check(got != null && got.offset() == 5, "committed with generation -1: " + got);
                p.beginTransaction();
                p.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(7)), new ConsumerGroupMetadata(group));
                p.commitTransaction();
                got = c.committed(Set.of(tp), TIMEOUT).get(tp);
                check(got != null && got.offset() == 7, "committed with only a group id: " + got);
            }
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get(30, TimeUnit.SECONDS);
            check(d.groupState() == org.apache.kafka.common.GroupState.EMPTY && d.isSimpleConsumerGroup(),
                    "group after standalone transactional commits: " + d);
        }
        System.out.println("OK: standalone: transactional offsets for a group without members committed");
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        String prefix = args[1];
        switch (args[2]) {
            case "commit-abort" -> commitAbort(prefix, args.length > 3 ? args[3] : "none");
            case "ctp" -> ctp(prefix);
            case "fence" -> fence(prefix);
            case "timeout" -> timeout(prefix);
            case "standalone" -> standalone(prefix);
            default -> throw new IllegalArgumentException("unknown scenario " + args[2]);
        }
    }
}
