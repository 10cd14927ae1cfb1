// A stateful Kafka Streams app of ours for tests/clients/test_streams.py (issue 13): orders
// joined with a customer table, then aggregated per region through a repartition topic.
//
//   orders     key order id, value "CUSTOMER:AMOUNT"
//   customers  key customer, value region (read whole as a GlobalKTable before processing, so
//              every order finds its customer whatever the timing: the oracle is deterministic)
//   output     key region, value "COUNT:SUM" after each order (the store's cache is off, so
//              every update is forwarded: per region the committed outputs count 1, 2, 3, ...)
//   hourly     key "REGION@WINDOWSTART", value the count of that region's orders in that
//              one-hour tumbling window (by record time), after each order
//
// orders -join(customers)-> (region, amount) -groupByKey (repartition)-> aggregate -> output,
//                                                         and -> windowed count -> hourly.
// The aggregate's store is backed by a compacted changelog topic, the windowed store's by a
// compact,delete one with a retention, and the grouping by a repartition topic that Streams
// purges with DeleteRecords; the test checks all three.
//
// Usage: java -cp 'tests/kafka/extras/lib/*:BUILD' RegionTotals streams.properties
// The properties file holds every setting (bootstrap.servers, application.id,
// processing.guarantee, ...), as WordCountDemo takes its own; topic names default to
// orders/customers/region-totals/region-hourly and can be set with
// regiontotals.{orders,customers,output,hourly}.
// The app prints "STATE <old> -> <new>" on each state change and exits 1 if Streams fails.

import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;

public final class RegionTotals {
    public static void main(String[] args) throws IOException, InterruptedException {
        if (args.length != 1) {
            System.err.println("usage: RegionTotals streams.properties");
            System.exit(2);
        }
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        String ordersTopic = (String) props.remove("regiontotals.orders");
        String customersTopic = (String) props.remove("regiontotals.customers");
        String outputTopic = (String) props.remove("regiontotals.output");
        String hourlyTopic = (String) props.remove("regiontotals.hourly");
        props.putIfAbsent(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.putIfAbsent(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.putIfAbsent(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.putIfAbsent("auto.offset.reset", "earliest");

        StreamsBuilder builder = new StreamsBuilder();
        GlobalKTable<String, String> customers = builder.globalTable(
            customersTopic == null ? "customers" : customersTopic,
            Consumed.with(Serdes.String(), Serdes.String()));
        KStream<String, String> orders = builder.stream(ordersTopic == null ? "orders" : ordersTopic);
        KGroupedStream<String, String> byRegion = orders
            .join(customers,
                (orderId, order) -> order.substring(0, order.indexOf(':')),
                (order, region) -> region + ":" + order.substring(order.indexOf(':') + 1))
            .map((orderId, regionAmount) -> {
                int colon = regionAmount.indexOf(':');
                return KeyValue.pair(regionAmount.substring(0, colon), regionAmount.substring(colon + 1));
            })
            .groupByKey(Grouped.as("by-region"));
        byRegion
            .aggregate(
                () -> "0:0",
                (region, amount, total) -> {
                    int colon = total.indexOf(':');
                    long count = Long.parseLong(total.substring(0, colon)) + 1;
                    long sum = Long.parseLong(total.substring(colon + 1)) + Long.parseLong(amount);
                    return count + ":" + sum;
                },
                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("region-totals-store"))
            .toStream()
            .to(outputTopic == null ? "region-totals" : outputTopic,
                Produced.with(Serdes.String(), Serdes.String()));
        byRegion
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofHours(1), Duration.ofHours(1)))
            .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("region-hourly-store"))
            .toStream((window, count) -> window.key() + "@" + window.window().start())
            .mapValues(count -> Long.toString(count))
            .to(hourlyTopic == null ? "region-hourly" : hourlyTopic,
                Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        int[] exit = {0};
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + before + " -> " + now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR) {
                exit[0] = 1;
                done.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            done.countDown();
        }));
        streams.start();
        done.await();
        streams.close();
        System.exit(exit[0]);
    }
}
