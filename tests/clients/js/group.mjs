// kafkajs 2.2.4 group consumer: two members of one group in this process; once both own
// partitions, TOTAL records are produced round-robin and consumed. Exits 0 after printing OK if
// every record was consumed exactly once, each partition was owned by exactly one member,
// and the committed offsets reached the end.
// Usage: node group.mjs BOOTSTRAP TOPIC GROUP TOTAL
import { Kafka, logLevel } from 'kafkajs';

const [BOOTSTRAP, TOPIC, GROUP, TOTAL_S] = process.argv.slice(2);
const TOTAL = Number(TOTAL_S);
const DEADLINE_MS = 90_000;

const kafka = new Kafka({ clientId: 'strata-js-group', brokers: [BOOTSTRAP], logLevel: logLevel.NOTHING });
const seen = new Map(); // "p/o" -> count
const owners = new Map(); // member index -> Set of partitions seen
const consumers = [];
const assigned = new Map(); // member index -> partitions of its latest GROUP_JOIN

for (let i = 0; i < 2; i++) {
  const c = kafka.consumer({ groupId: GROUP, sessionTimeout: 6000, heartbeatInterval: 1000, rebalanceTimeout: 10000 });
  await c.connect();
  await c.subscribe({ topic: TOPIC, fromBeginning: true });
  owners.set(i, new Set());
  c.on(c.events.GROUP_JOIN, (e) => {
    const a = e.payload.memberAssignment[TOPIC] || [];
    assigned.set(i, a);
  });
  await c.run({
    eachMessage: async ({ partition, message }) => {
      const k = `${partition}/${message.offset}`;
      seen.set(k, (seen.get(k) || 0) + 1);
      owners.get(i).add(partition);
    },
  });
  consumers.push(c);
}

// Both members must own partitions before anything is produced, or the first member to
// join would consume everything before the second arrives.
const jstart = Date.now();
const split = () => {
  const a = assigned.get(0) || [], b = assigned.get(1) || [];
  return a.length > 0 && b.length > 0 && a.length + b.length === 6;
};
while (!split() && Date.now() - jstart < DEADLINE_MS) {
  await new Promise((r) => setTimeout(r, 100));
}
const producer = kafka.producer();
await producer.connect();
const messages = [];
for (let i = 0; i < TOTAL; i++) messages.push({ value: `v${i}`, partition: i % 6 });
await producer.send({ topic: TOPIC, acks: -1, messages });
await producer.disconnect();

const start = Date.now();
while (seen.size < TOTAL && Date.now() - start < DEADLINE_MS) {
  await new Promise((r) => setTimeout(r, 100));
}
let ok = true;
if (seen.size !== TOTAL) { console.log(`consumed ${seen.size} of ${TOTAL}`); ok = false; }
const dups = [...seen.entries()].filter(([, c]) => c > 1);
if (dups.length) { console.log(`duplicates: ${JSON.stringify(dups.slice(0, 10))}`); ok = false; }
const a = owners.get(0), b = owners.get(1);
const both = [...a].filter((p) => b.has(p));
if (both.length) { console.log(`partitions consumed by both members: ${both}`); ok = false; }
if (a.size === 0 || b.size === 0) { console.log(`one member got nothing: ${[...a]} / ${[...b]}`); ok = false; }

// Commits land after each batch; wait for them to reach the end of every partition.
const admin = kafka.admin();
await admin.connect();
let offsets = [];
const cstart = Date.now();
for (;;) {
  offsets = await admin.fetchOffsets({ groupId: GROUP, topics: [TOPIC] });
  const parts = offsets[0].partitions;
  const sum = parts.reduce((s, p) => s + Math.max(Number(p.offset), 0), 0);
  if (sum === TOTAL || Date.now() - cstart > 20_000) break;
  await new Promise((r) => setTimeout(r, 200));
}
const sum = offsets[0].partitions.reduce((s, p) => s + Math.max(Number(p.offset), 0), 0);
if (sum !== TOTAL) { console.log(`committed ${sum} of ${TOTAL}: ${JSON.stringify(offsets)}`); ok = false; }
const groups = await admin.listGroups();
if (!groups.groups.some((g) => g.groupId === GROUP)) { console.log(`group not listed: ${JSON.stringify(groups)}`); ok = false; }
await admin.disconnect();
for (const c of consumers) await c.disconnect();
console.log(ok ? 'OK' : 'FAILED');
process.exit(ok ? 0 : 1);
