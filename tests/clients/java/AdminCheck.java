// The Java client's (kafka-clients 4.1) Admin API against a running broker, one call after the
// other, each answer checked: createTopics with configs (and the configs it reports back),
// describeTopics (by name and by id), describeCluster, listOffsets (earliest, latest, a timestamp, max timestamp,
// read_committed), describeConfigs and incrementalAlterConfigs (SET, DELETE, APPEND,
// SUBTRACT), createPartitions, deleteRecords, the consumer-group calls (list, describe, list
// and alter offsets, delete offsets, delete groups) and deleteTopics, plus a non-idempotent
// acks=1 producer and the errors Kafka gives for common mistakes (each checked against Kafka 4.1).
// Usage: java -cp lib/*:build AdminCheck BOOTSTRAP PREFIX. Exit 0 and "OK: ..." = passed.
//        java -cp lib/*:build AdminCheck versions: prints "KEY NAME OLDEST LATEST" for every API
//        this client can send to a broker (its KIP-896 minimums), for the test to compare.
//        java -cp lib/*:build AdminCheck BOOTSTRAP features: prints the features the broker
//        finalizes and supports, as the client sees them (describeFeatures = ApiVersions v3+).

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.*;
import org.apache.kafka.common.message.ApiMessageType;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.serialization.*;

public final class AdminCheck {
    static final long BASE_TS = 1_700_000_000_000L;

    static String bootstrap;

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    static <T> T get(KafkaFuture<T> f) throws Exception {
        return f.get(30, TimeUnit.SECONDS);
    }

    /** The cause of a failed future, asserting it is of `want`. */
    static void fails(KafkaFuture<?> f, Class<? extends Throwable> want, String what) throws Exception {
        try {
            f.get(30, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            check(want.isInstance(e.getCause()), what + ": failed with " + e.getCause() + ", expected " + want.getSimpleName());
            System.out.println(what + ": " + e.getCause().getClass().getSimpleName());
            return;
        }
        check(false, what + ": succeeded, expected " + want.getSimpleName());
    }

    static Properties common() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "30000");
        return p;
    }

    static Map<String, ConfigEntry> topicConfig(Admin admin, String topic) throws Exception {
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config c = get(admin.describeConfigs(List.of(r)).values().get(r));
        Map<String, ConfigEntry> out = new HashMap<>();
        for (ConfigEntry e : c.entries()) out.put(e.name(), e);
        return out;
    }

    static long offsetFor(Admin admin, TopicPartition tp, OffsetSpec spec, IsolationLevel iso) throws Exception {
        return get(admin.listOffsets(Map.of(tp, spec), new ListOffsetsOptions(iso)).partitionResult(tp)).offset();
    }

    static void alterTopic(Admin admin, String topic, AlterConfigOp... ops) throws Exception {
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        get(admin.incrementalAlterConfigs(Map.of(r, List.of(ops))).values().get(r));
    }

    static void clientVersions() {
        for (ApiKeys k : ApiKeys.apisForListener(ApiMessageType.ListenerType.BROKER)) {
            System.out.println(k.id + " " + k.name + " " + k.oldestVersion() + " " + k.latestVersion());
        }
    }

    static void features() throws Exception {
        try (Admin admin = Admin.create(common())) {
            FeatureMetadata fm = get(admin.describeFeatures().featureMetadata());
            for (Map.Entry<String, FinalizedVersionRange> e : fm.finalizedFeatures().entrySet()) {
                System.out.println("finalized " + e.getKey() + " " + e.getValue().minVersionLevel() + " " + e.getValue().maxVersionLevel());
            }
            for (Map.Entry<String, SupportedVersionRange> e : fm.supportedFeatures().entrySet()) {
                System.out.println("supported " + e.getKey() + " " + e.getValue().minVersion() + " " + e.getValue().maxVersion());
            }
        }
    }

    @SuppressWarnings("removal") // listConsumerGroups: still what many tools call
    public static void main(String[] args) throws Exception {
        if (args[0].equals("versions")) {
            clientVersions();
            return;
        }
        bootstrap = args[0];
        String prefix = args[1];
        if (prefix.equals("features")) {
            features();
            return;
        }
        String cfgTopic = prefix + "-cfg", logTopic = prefix + "-log", groupTopic = prefix + "-grp";
        try (Admin admin = Admin.create(common())) {
            // --- describeCluster
            DescribeClusterResult cluster = admin.describeCluster();
            Collection<Node> nodes = get(cluster.nodes());
            check(!nodes.isEmpty(), "describeCluster: no nodes");
            check(get(cluster.clusterId()) != null, "describeCluster: no cluster id");
            Node controller = get(cluster.controller());
            System.out.println("cluster " + get(cluster.clusterId()) + " nodes " + nodes + " controller " + controller);

            // --- createTopics with configs; the answer reports the configs (CreateTopics v5+)
            NewTopic nt = new NewTopic(cfgTopic, 3, (short) 1).configs(Map.of(
                    "cleanup.policy", "compact", "retention.ms", "123456", "max.message.bytes", "200000"));
            CreateTopicsResult created = admin.createTopics(List.of(nt,
                    new NewTopic(logTopic, 1, (short) 1), new NewTopic(groupTopic, 2, (short) 1)));
            get(created.all());
            check(get(created.numPartitions(cfgTopic)) == 3, "createTopics numPartitions");
            check(get(created.replicationFactor(cfgTopic)) == 1, "createTopics replicationFactor");
            check(!get(created.topicId(cfgTopic)).toString().equals("AAAAAAAAAAAAAAAAAAAAAA"), "createTopics: zero topic id");
            Config reported = get(created.config(cfgTopic));
            check("123456".equals(reported.get("retention.ms").value()), "createTopics config retention.ms " + reported.get("retention.ms"));
            check("compact".equals(reported.get("cleanup.policy").value()), "createTopics config cleanup.policy " + reported.get("cleanup.policy"));
            fails(admin.createTopics(List.of(new NewTopic(cfgTopic, 1, (short) 1))).all(), TopicExistsException.class, "create an existing topic");
            fails(admin.createTopics(List.of(new NewTopic(prefix + "-rf", 1, (short) 5))).all(),
                    InvalidReplicationFactorException.class, "replication factor above the broker count");
            fails(admin.createTopics(List.of(new NewTopic(prefix + "-badcfg", 1, (short) 1)
                    .configs(Map.of("no.such.config", "1")))).all(), InvalidConfigurationException.class, "unknown topic config");
            get(admin.createTopics(List.of(new NewTopic(prefix + "-vo", 2, (short) 1)), new CreateTopicsOptions().validateOnly(true)).all());
            check(!get(admin.listTopics().names()).contains(prefix + "-vo"), "validateOnly created the topic");

            // --- describeTopics
            TopicDescription td = get(admin.describeTopics(List.of(cfgTopic)).topicNameValues().get(cfgTopic));
            check(td.partitions().size() == 3, "describeTopics partitions " + td.partitions().size());
            check(td.topicId().equals(get(created.topicId(cfgTopic))), "describeTopics topic id differs from createTopics");
            for (TopicPartitionInfo p : td.partitions()) {
                check(p.leader() != null && !p.replicas().isEmpty() && !p.isr().isEmpty(), "describeTopics partition " + p);
            }
            fails(admin.describeTopics(List.of(prefix + "-missing")).allTopicNames(), UnknownTopicOrPartitionException.class,
                    "describe a missing topic");
            // By topic id (Metadata v12 with ids: the Java client sends an empty name beside each id).
            org.apache.kafka.common.Uuid cfgId = get(created.topicId(cfgTopic));
            TopicDescription byId = get(admin.describeTopics(TopicCollection.ofTopicIds(List.of(cfgId))).allTopicIds()).get(cfgId);
            check(byId.name().equals(cfgTopic) && byId.partitions().size() == 3, "describeTopics by id: " + byId);
            fails(admin.describeTopics(TopicCollection.ofTopicIds(List.of(org.apache.kafka.common.Uuid.randomUuid()))).allTopicIds(),
                    UnknownTopicIdException.class, "describe a missing topic id");

            // --- describeConfigs / incrementalAlterConfigs
            Map<String, ConfigEntry> cfg = topicConfig(admin, cfgTopic);
            check("123456".equals(cfg.get("retention.ms").value()), "describeConfigs retention.ms " + cfg.get("retention.ms"));
            check(cfg.get("retention.ms").source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                    "retention.ms source " + cfg.get("retention.ms").source());
            check(cfg.containsKey("segment.bytes") && cfg.get("segment.bytes").source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                    "segment.bytes default missing or marked as set: " + cfg.get("segment.bytes"));
            alterTopic(admin, cfgTopic,
                    new AlterConfigOp(new ConfigEntry("retention.ms", "999999"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("max.message.bytes", ""), AlterConfigOp.OpType.DELETE),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.APPEND));
            cfg = topicConfig(admin, cfgTopic);
            check("999999".equals(cfg.get("retention.ms").value()), "after SET retention.ms " + cfg.get("retention.ms"));
            check(cfg.get("max.message.bytes").source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                    "after DELETE max.message.bytes " + cfg.get("max.message.bytes"));
            check("compact,delete".equals(cfg.get("cleanup.policy").value()), "after APPEND cleanup.policy " + cfg.get("cleanup.policy"));
            alterTopic(admin, cfgTopic, new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.SUBTRACT));
            cfg = topicConfig(admin, cfgTopic);
            check("delete".equals(cfg.get("cleanup.policy").value()), "after SUBTRACT cleanup.policy " + cfg.get("cleanup.policy"));
            check(cfg.get("cleanup.policy").type() == ConfigEntry.ConfigType.LIST, "cleanup.policy type " + cfg.get("cleanup.policy").type());
            // The empty list (Kafka 4.1+: neither delete nor compact, keep everything).
            alterTopic(admin, cfgTopic, new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.SUBTRACT));
            cfg = topicConfig(admin, cfgTopic);
            check("".equals(cfg.get("cleanup.policy").value()), "after SUBTRACT of the last item " + cfg.get("cleanup.policy"));
            alterTopic(admin, cfgTopic, new AlterConfigOp(new ConfigEntry("cleanup.policy", ""), AlterConfigOp.OpType.DELETE));
            fails(admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.TOPIC, cfgTopic),
                    List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "5"), AlterConfigOp.OpType.APPEND)))).all(),
                    InvalidConfigurationException.class, "APPEND to a setting that is not a list");
            ConfigResource badTopic = new ConfigResource(ConfigResource.Type.TOPIC, prefix + "-missing");
            fails(admin.describeConfigs(List.of(badTopic)).values().get(badTopic), UnknownTopicOrPartitionException.class,
                    "describeConfigs of a missing topic");
            ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(nodes.iterator().next().id()));
            Config bc = get(admin.describeConfigs(List.of(broker)).values().get(broker));
            check(!bc.entries().isEmpty(), "describeConfigs of the broker: no entries");

            // --- createPartitions
            get(admin.createPartitions(Map.of(cfgTopic, NewPartitions.increaseTo(5))).all());
            td = get(admin.describeTopics(List.of(cfgTopic)).topicNameValues().get(cfgTopic));
            check(td.partitions().size() == 5, "after createPartitions: " + td.partitions().size() + " partitions");
            fails(admin.createPartitions(Map.of(cfgTopic, NewPartitions.increaseTo(2))).all(), InvalidPartitionsException.class,
                    "decrease the partition count");

            // --- a plain acks=1 producer with set timestamps, then listOffsets / deleteRecords
            Properties pp = common();
            pp.put("acks", "1");
            pp.put("enable.idempotence", "false");
            pp.put("compression.type", "lz4");
            TopicPartition tp = new TopicPartition(logTopic, 0);
            try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
                for (int i = 0; i < 10; i++) {
                    // One record per batch (get() each), timestamps out of order at offset 7.
                    long ts = BASE_TS + (i == 7 ? 100 : i * 10);
                    RecordMetadata md = p.send(new ProducerRecord<>(logTopic, 0, ts, null, ("v" + i).getBytes(StandardCharsets.UTF_8)))
                            .get(30, TimeUnit.SECONDS);
                    check(md.offset() == i, "acks=1 producer: offset " + md.offset() + " for record " + i);
                }
            }
            check(offsetFor(admin, tp, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED) == 0, "earliest");
            check(offsetFor(admin, tp, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED) == 10, "latest");
            check(offsetFor(admin, tp, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED) == 10, "latest read_committed");
            check(offsetFor(admin, tp, OffsetSpec.forTimestamp(BASE_TS + 45), IsolationLevel.READ_UNCOMMITTED) == 5, "forTimestamp +45");
            check(offsetFor(admin, tp, OffsetSpec.forTimestamp(BASE_TS + 75), IsolationLevel.READ_UNCOMMITTED) == 7, "forTimestamp +75");
            check(offsetFor(admin, tp, OffsetSpec.forTimestamp(BASE_TS + 101), IsolationLevel.READ_UNCOMMITTED) == -1, "forTimestamp past the end");
            ListOffsetsResult.ListOffsetsResultInfo max =
                    get(admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).partitionResult(tp));
            check(max.offset() == 7 && max.timestamp() == BASE_TS + 100, "maxTimestamp " + max);
            DeletedRecords dr = get(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4))).lowWatermarks().get(tp));
            check(dr.lowWatermark() == 4, "deleteRecords low watermark " + dr.lowWatermark());
            check(offsetFor(admin, tp, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED) == 4, "earliest after deleteRecords");
            fails(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(11))).lowWatermarks().get(tp),
                    org.apache.kafka.common.errors.OffsetOutOfRangeException.class, "deleteRecords past the high watermark");

            // --- consumer groups
            String group = prefix + "-g";
            Properties cp = common();
            cp.put("group.id", group);
            cp.put("enable.auto.commit", "false");
            cp.put("auto.offset.reset", "earliest");
            List<TopicPartition> gtps = List.of(new TopicPartition(groupTopic, 0), new TopicPartition(groupTopic, 1));
            try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(common(), new ByteArraySerializer(), new ByteArraySerializer())) {
                for (int i = 0; i < 20; i++) p.send(new ProducerRecord<>(groupTopic, i % 2, null, ("g" + i).getBytes(StandardCharsets.UTF_8)));
                p.flush();
            }
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                c.subscribe(List.of(groupTopic));
                int seen = 0;
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                while (seen < 20) {
                    check(System.nanoTime() < deadline, "group consumer read " + seen + " of 20");
                    seen += c.poll(Duration.ofMillis(300)).count();
                }
                c.commitSync();
                // While the member is alive: Stable, one member owning both partitions.
                ConsumerGroupDescription d = get(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group));
                check(d.groupState() == GroupState.STABLE, "describeConsumerGroups state " + d.groupState());
                check(d.members().size() == 1 && d.members().iterator().next().assignment().topicPartitions().equals(new HashSet<>(gtps)),
                        "describeConsumerGroups members " + d.members());
                check(!d.isSimpleConsumerGroup(), "a subscribing group described as simple");
                fails(admin.deleteConsumerGroups(List.of(group)).all(), GroupNotEmptyException.class, "delete a group with members");
                fails(admin.alterConsumerGroupOffsets(group, Map.of(gtps.get(0), new OffsetAndMetadata(1))).all(),
                        UnknownMemberIdException.class, "alter the offsets of a group with members");
                fails(admin.deleteConsumerGroupOffsets(group, Set.of(gtps.get(0))).all(),
                        GroupSubscribedToTopicException.class, "delete offsets of a topic the group subscribes to");
            }
            Collection<GroupListing> groups = get(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all());
            check(groups.stream().anyMatch(g -> g.groupId().equals(group)), "listGroups(consumer) " + groups);
            Collection<ConsumerGroupListing> cgroups = get(admin.listConsumerGroups().all());
            check(cgroups.stream().anyMatch(g -> g.groupId().equals(group)), "listConsumerGroups " + cgroups);
            ConsumerGroupDescription d = get(admin.describeConsumerGroups(List.of(group)).describedGroups().get(group));
            check(d.groupState() == GroupState.EMPTY && d.members().isEmpty(), "after close: " + d.groupState() + " " + d.members());
            Map<TopicPartition, OffsetAndMetadata> offs = get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
            check(offs.get(gtps.get(0)).offset() == 10 && offs.get(gtps.get(1)).offset() == 10, "listConsumerGroupOffsets " + offs);
            get(admin.alterConsumerGroupOffsets(group, Map.of(gtps.get(0), new OffsetAndMetadata(3, "meta"))).all());
            offs = get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
            check(offs.get(gtps.get(0)).offset() == 3 && "meta".equals(offs.get(gtps.get(0)).metadata()), "after alter " + offs);
            check(offs.get(gtps.get(1)).offset() == 10, "alter touched another partition " + offs);
            get(admin.deleteConsumerGroupOffsets(group, Set.of(gtps.get(1))).all());
            offs = get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
            check(offs.get(gtps.get(1)) == null && offs.get(gtps.get(0)).offset() == 3, "after deleteConsumerGroupOffsets " + offs);
            get(admin.deleteConsumerGroups(List.of(group)).all());
            cgroups = get(admin.listConsumerGroups().all());
            check(cgroups.stream().noneMatch(g -> g.groupId().equals(group)), "deleted group still listed " + cgroups);
            fails(admin.deleteConsumerGroups(List.of(group)).all(), GroupIdNotFoundException.class, "delete a missing group");

            // --- deleteTopics
            get(admin.deleteTopics(List.of(cfgTopic, logTopic, groupTopic)).all());
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (true) {
                Set<String> names = get(admin.listTopics().names());
                if (!names.contains(cfgTopic) && !names.contains(logTopic) && !names.contains(groupTopic)) break;
                check(System.nanoTime() < deadline, "deleted topics still listed: " + names);
                Thread.sleep(200);
            }
            fails(admin.deleteTopics(List.of(cfgTopic)).all(), UnknownTopicOrPartitionException.class, "delete a missing topic");
        }
        System.out.println("OK: admin: every call answered as expected");
    }
}
