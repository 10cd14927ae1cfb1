// The Java client (kafka-clients 4.1) over SASL_PLAINTEXT (or SASL_SSL, given
// -Dstrata.truststore=CA.pem, a PEM truststore): produce records and read them back
// with a group-less consumer, authenticating with PLAIN or SCRAM; or, with `expect-fail`, check
// that the broker refuses the credentials (SaslAuthenticationException) and serves nothing.
// With a hold time, the consumer keeps polling that long after the first read (to live through
// KIP-368 re-authentications) and reads a second batch at the end.
// Usage: java -cp lib/*:build SaslCheck HOST:PORT TOPIC MECHANISM USER PASSWORD [ok|expect-fail] [HOLD_MS]
// Exit 0 = every check passed.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class SaslCheck {
    static Properties props(String bootstrap, String mechanism, String user, String password) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("security.protocol", "SASL_PLAINTEXT");
        String truststore = System.getProperty("strata.truststore");
        if (truststore != null) {
            p.put("security.protocol", "SASL_SSL");
            p.put("ssl.truststore.type", "PEM");
            p.put("ssl.truststore.location", truststore);
        }
        p.put("sasl.mechanism", mechanism);
        String module = mechanism.equals("PLAIN")
            ? "org.apache.kafka.common.security.plain.PlainLoginModule"
            : "org.apache.kafka.common.security.scram.ScramLoginModule";
        p.put("sasl.jaas.config", module + " required username=\"" + user + "\" password=\"" + password + "\";");
        return p;
    }

    static void produce(Properties base, String topic, int from, int n) throws Exception {
        Properties p = (Properties) base.clone();
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("max.block.ms", "20000");
        p.put("delivery.timeout.ms", "30000");
        p.put("request.timeout.ms", "10000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = from; i < from + n; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i)).get();
            }
        }
    }

    static List<String> read(KafkaConsumer<String, String> c, int want, long deadlineMs) {
        List<String> got = new ArrayList<>();
        while (got.size() < want && System.currentTimeMillis() < deadlineMs) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got.add(r.value());
        }
        return got;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], mechanism = args[2], user = args[3], password = args[4];
        String mode = args.length > 5 ? args[5] : "ok";
        long holdMs = args.length > 6 ? Long.parseLong(args[6]) : 0;
        Properties base = props(bootstrap, mechanism, user, password);
        if (mode.equals("expect-fail")) {
            try {
                produce(base, topic, 0, 1);
            } catch (ExecutionException e) {
                if (e.getCause() instanceof SaslAuthenticationException) {
                    System.out.println("REFUSED " + e.getCause().getMessage());
                    return;
                }
                throw e;
            } catch (SaslAuthenticationException e) {
                System.out.println("REFUSED " + e.getMessage());
                return;
            }
            throw new AssertionError("the broker accepted wrong credentials");
        }
        produce(base, topic, 0, 10);
        Properties cp = (Properties) base.clone();
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<String> got = read(c, 10, System.currentTimeMillis() + 30000);
            for (int i = 0; i < 10; i++) {
                if (got.size() <= i || !got.get(i).equals("v" + i)) throw new AssertionError("read " + got);
            }
            if (holdMs > 0) {
                // Keep the connection busy past several session lifetimes: the client must
                // re-authenticate on it (KIP-368) or the broker closes it.
                long until = System.currentTimeMillis() + holdMs;
                while (System.currentTimeMillis() < until) c.poll(Duration.ofMillis(200));
                produce(base, topic, 10, 5);
                List<String> more = read(c, 5, System.currentTimeMillis() + 30000);
                if (more.size() != 5 || !more.get(0).equals("v10")) throw new AssertionError("after hold read " + more);
            }
        }
        System.out.println("OK");
    }
}
