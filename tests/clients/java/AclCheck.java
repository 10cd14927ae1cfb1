// ACLs with the Java client (kafka-clients 4.1) over SASL_PLAINTEXT, PLAIN: the admin (a super
// user) creates a topic; alice's idempotent producer is refused (InitProducerId needs
// IDEMPOTENT_WRITE or WRITE on some topic: ClusterAuthorizationException, or the topic's
// TopicAuthorizationException), alice's Admin cannot create ACLs
// (ClusterAuthorizationException); the admin grants WRITE on a PREFIXED pattern with
// Admin.createAcls, describes it back with describeAcls, and alice's producer then succeeds;
// deleteAcls removes it.
// Usage: java -cp lib/*:build AclCheck HOST:PORT ADMIN_PASSWORD ALICE_PASSWORD
// Exit 0 = every check passed.

import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringSerializer;

public final class AclCheck {
    static Properties props(String bootstrap, String user, String password) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "PLAIN");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required username=\""
            + user + "\" password=\"" + password + "\";");
        p.put("request.timeout.ms", "10000");
        p.put("default.api.timeout.ms", "20000");
        return p;
    }

    /** Sends one record as `p`'s user; the exception's cause, or null when it landed. */
    static Throwable produce(Properties base, String topic) {
        Properties p = (Properties) base.clone();
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("max.block.ms", "20000");
        p.put("delivery.timeout.ms", "30000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.send(new ProducerRecord<>(topic, 0, "k", "v")).get();
            return null;
        } catch (ExecutionException e) {
            return e.getCause();
        } catch (Exception e) {
            return e;
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        Properties admin = props(bootstrap, "admin", args[1]);
        Properties alice = props(bootstrap, "alice", args[2]);
        String topic = "java-acl-t";
        try (Admin a = Admin.create(admin)) {
            a.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        }
        Throwable refused = produce(alice, topic);
        check(refused instanceof ClusterAuthorizationException || refused instanceof TopicAuthorizationException,
            "alice without ACLs produced, or failed otherwise: " + refused);
        System.out.println("alice refused: " + refused.getClass().getSimpleName());

        AclBinding grant = new AclBinding(
            new ResourcePattern(ResourceType.TOPIC, "java-acl-", PatternType.PREFIXED),
            new AccessControlEntry("User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW));
        try (Admin a = Admin.create(alice)) {
            try {
                a.createAcls(List.of(grant)).all().get();
                throw new AssertionError("alice granted herself an ACL");
            } catch (ExecutionException e) {
                check(e.getCause() instanceof ClusterAuthorizationException, "alice's createAcls: " + e.getCause());
            }
        }
        try (Admin a = Admin.create(admin)) {
            a.createAcls(List.of(grant)).all().get();
            AclBindingFilter mine = new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.ANY, null, PatternType.ANY),
                new AccessControlEntryFilter("User:alice", null, AclOperation.ANY, AclPermissionType.ANY));
            Collection<AclBinding> listed = a.describeAcls(mine).values().get();
            check(listed.size() == 1 && listed.contains(grant), "describeAcls: " + listed);
            Throwable after = produce(alice, topic);
            check(after == null, "alice with WRITE on java-acl-*: " + after);
            System.out.println("alice produced after the grant");
            Collection<AclBinding> deleted = a.deleteAcls(List.of(mine)).all().get();
            check(deleted.size() == 1 && deleted.contains(grant), "deleteAcls: " + deleted);
            check(a.describeAcls(mine).values().get().isEmpty(), "ACLs left after deleteAcls");
        }
        System.out.println("OK");
    }
}
