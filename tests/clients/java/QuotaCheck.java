// The Java client's (kafka-clients 4.1) client-quota calls (KIP-546): alterClientQuotas for
// user, client-id and user+client-id entities, names and defaults, with validateOnly, removals
// and refused changes; then describeClientQuotas with exact, default and any-name filters,
// strict or not. Everything the broker answers is printed in a stable order, one line per
// answer, so the test can compare Strata's lines with Kafka 4.1's.
// Usage: java -cp lib/*:build QuotaCheck BOOTSTRAP. Exit 0 and "OK: ..." = ran to the end.

import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.quota.*;

public final class QuotaCheck {
    static Admin admin;

    static ClientQuotaEntity entity(String... typeAndName) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < typeAndName.length; i += 2) m.put(typeAndName[i], typeAndName[i + 1]);
        return new ClientQuotaEntity(m);
    }

    static String show(ClientQuotaEntity e) {
        TreeMap<String, String> sorted = new TreeMap<>();
        e.entries().forEach((k, v) -> sorted.put(k, v == null ? "<default>" : v));
        return sorted.toString();
    }

    /// One alteration; prints "alter ENTITY -> ok" or the error's class and message.
    static void alter(String label, ClientQuotaEntity e, boolean validateOnly, ClientQuotaAlteration.Op... ops) {
        ClientQuotaAlteration a = new ClientQuotaAlteration(e, Arrays.asList(ops));
        String outcome;
        try {
            admin.alterClientQuotas(List.of(a), new AlterClientQuotasOptions().validateOnly(validateOnly))
                .all().get(30, TimeUnit.SECONDS);
            outcome = "ok";
        } catch (ExecutionException ex) {
            outcome = ex.getCause().getClass().getSimpleName() + ": " + ex.getCause().getMessage();
        } catch (Exception ex) {
            outcome = ex.getClass().getSimpleName() + ": " + ex.getMessage();
        }
        System.out.println("alter " + label + " " + show(e) + " -> " + outcome);
    }

    static String describe(ClientQuotaFilter f) {
        try {
            Map<ClientQuotaEntity, Map<String, Double>> got =
                admin.describeClientQuotas(f).entities().get(30, TimeUnit.SECONDS);
            TreeMap<String, String> sorted = new TreeMap<>();
            got.forEach((e, q) -> sorted.put(show(e), new TreeMap<>(q).toString()));
            return sorted.toString();
        } catch (ExecutionException ex) {
            return ex.getCause().getClass().getSimpleName() + ": " + ex.getCause().getMessage();
        } catch (Exception ex) {
            return ex.getClass().getSimpleName() + ": " + ex.getMessage();
        }
    }

    static ClientQuotaAlteration.Op set(String key, double v) {
        return new ClientQuotaAlteration.Op(key, v);
    }

    static ClientQuotaAlteration.Op remove(String key) {
        return new ClientQuotaAlteration.Op(key, null);
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        admin = Admin.create(p);
        try {
            String U = ClientQuotaEntity.USER, C = ClientQuotaEntity.CLIENT_ID;
            alter("user", entity(U, "alice"), false, set("producer_byte_rate", 1048576), set("request_percentage", 50.5));
            alter("user-default", entity(U, null), false, set("consumer_byte_rate", 2097152));
            alter("user-client", entity(U, "alice", C, "app"), false, set("producer_byte_rate", 2048));
            alter("user-default-client", entity(U, null, C, "app"), false, set("consumer_byte_rate", 4096));
            alter("client-default", entity(C, null), false, set("request_percentage", 200));
            alter("client", entity(C, "app"), false, set("controller_mutation_rate", 10));
            // Refused: an unknown key, a fractional byte rate; validateOnly changes nothing.
            alter("bad-key", entity(C, "bad"), false, set("bogus_rate", 1));
            alter("fraction", entity(C, "bad"), false, set("producer_byte_rate", 1.5));
            alter("validate-only", entity(U, "bob"), true, set("producer_byte_rate", 1000));
            alter("validate-only-bad", entity(U, "bob"), true, set("bogus_rate", 1));
            // Removing a key the entity lacks changes nothing and is no error.
            alter("remove-missing", entity(U, "carol"), false, remove("producer_byte_rate"));
            alter("remove", entity(U, "alice"), false, remove("request_percentage"));
            // The describe answers come from the broker's metadata image: wait for the last change.
            long deadline = System.currentTimeMillis() + 20_000;
            ClientQuotaFilter aliceOnly = ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofEntity(U, "alice")));
            while (System.currentTimeMillis() < deadline && describe(aliceOnly).contains("request_percentage")) {
                Thread.sleep(100);
            }
            Map<String, ClientQuotaFilter> filters = new LinkedHashMap<>();
            filters.put("all", ClientQuotaFilter.all());
            filters.put("all-strict", ClientQuotaFilter.containsOnly(List.of()));
            filters.put("user-alice", ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntity(U, "alice"))));
            filters.put("user-alice-strict", aliceOnly);
            filters.put("user-default", ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofDefaultEntity(U))));
            filters.put("user-default-strict", ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofDefaultEntity(U))));
            filters.put("user-any", ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntityType(U))));
            filters.put("user-any-strict", ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofEntityType(U))));
            filters.put("client-any", ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntityType(C))));
            filters.put("client-app", ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntity(C, "app"))));
            filters.put("user-alice-client-app", ClientQuotaFilter.containsOnly(List.of(
                ClientQuotaFilterComponent.ofEntity(U, "alice"), ClientQuotaFilterComponent.ofEntity(C, "app"))));
            filters.put("user-any-client-app", ClientQuotaFilter.contains(List.of(
                ClientQuotaFilterComponent.ofEntityType(U), ClientQuotaFilterComponent.ofEntity(C, "app"))));
            filters.put("user-bob", ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntity(U, "bob"))));
            filters.put("ip-any", ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntityType(ClientQuotaEntity.IP))));
            filters.put("unknown-type", ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntityType("group"))));
            filters.put("ip-and-user", ClientQuotaFilter.contains(List.of(
                ClientQuotaFilterComponent.ofEntityType(ClientQuotaEntity.IP), ClientQuotaFilterComponent.ofEntityType(U))));
            for (Map.Entry<String, ClientQuotaFilter> f : filters.entrySet()) {
                System.out.println("describe " + f.getKey() + " -> " + describe(f.getValue()));
            }
            System.out.println("OK: quota calls answered");
        } finally {
            admin.close();
        }
    }
}
