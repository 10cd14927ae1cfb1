// kafkajs 2.2.4 producer + admin against a running broker. Started by
// tests/clients/test_kafkajs.py, which passes BOOTSTRAP, TOPIC, PARTITIONS and OUT (a JSON file
// where this script writes every acknowledged record; pytest then reads the topic back with
// librdkafka and checks each one, since kafkajs has no group-less consumer).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { Kafka, CompressionTypes, logLevel } from 'kafkajs';

const BOOTSTRAP = process.env.BOOTSTRAP;
const TOPIC = process.env.TOPIC;
const PARTITIONS = Number(process.env.PARTITIONS);
const OUT = process.env.OUT;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';
const BIG_VALUE_LEN = 1024 * 1024 - 4096;

const b64 = (b) => (b === null ? null : Buffer.from(b).toString('base64'));

function recordSet(codec, partitions, big) {
  const recs = [];
  for (let i = 0; i < 6; i++) {
    recs.push({ key: Buffer.from(`js-${codec}-${i}`), value: Buffer.from(`${codec} value ${i}`),
      headers: [['h1', Buffer.from('x')], ['trace', Buffer.from(String(i))]], partition: null });
  }
  for (let p = 0; p < partitions; p++) {
    recs.push({ key: null, value: Buffer.from(`${codec} unkeyed to ${p}`), headers: [], partition: p });
  }
  recs.push({ key: Buffer.from('tombstone'), value: null, headers: [['why', Buffer.from('delete')]], partition: 0 });
  recs.push({ key: Buffer.from('empty-value'), value: Buffer.alloc(0), headers: [], partition: 1 % partitions });
  recs.push({ key: null, value: null, headers: [], partition: 2 % partitions });
  recs.push({ key: Buffer.from('bin'), value: Buffer.from([...Array(256).keys()]), headers: [], partition: 0 });
  if (big) {
    recs.push({ key: Buffer.from('big'), value: randomBytes(BIG_VALUE_LEN), headers: [], partition: 1 % partitions });
  }
  return recs;
}

test('kafkajs produces every record type with acks=all (none + gzip) and offsets match', async () => {
  assert.ok(BOOTSTRAP && TOPIC && PARTITIONS && OUT, 'BOOTSTRAP, TOPIC, PARTITIONS, OUT must be set');
  const kafka = new Kafka({ clientId: 'strata-kafkajs-test', brokers: [BOOTSTRAP], logLevel: logLevel.WARN,
    connectionTimeout: 10000, requestTimeout: 30000, retry: { retries: 3 } });
  const admin = kafka.admin();
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await admin.connect();
  await producer.connect();
  const sent = [];
  try {
    const before = await admin.fetchTopicOffsets(TOPIC);
    assert.equal(before.length, PARTITIONS, 'metadata partition count');
    for (const o of before) assert.equal(o.high, '0', `partition ${o.partition} not empty at start`);

    for (const [name, codec] of [['none', CompressionTypes.None], ['gzip', CompressionTypes.GZIP]]) {
      const recs = recordSet(name, PARTITIONS, name === 'none');
      // One send per record: its result names the partition and the offset it got.
      for (const r of recs) {
        const msg = { key: r.key, value: r.value, headers: Object.fromEntries(r.headers) };
        if (r.partition !== null) msg.partition = r.partition;
        const [res] = await producer.send({ topic: TOPIC, acks: -1, compression: codec, messages: [msg] });
        assert.equal(res.errorCode, 0, `error code for ${r.key}`);
        sent.push({ ...r, partition: res.partition, offset: Number(res.baseOffset) });
      }
      // And one multi-record send per partition: offsets are baseOffset + position.
      for (let p = 0; p < PARTITIONS; p++) {
        const batch = [0, 1, 2].map((i) => ({ key: Buffer.from(`batch-${name}-${p}-${i}`),
          value: Buffer.from(`batched ${i}`), headers: [['n', Buffer.from(String(i))]], partition: p }));
        const [res] = await producer.send({ topic: TOPIC, acks: -1, compression: codec,
          messages: batch.map((r) => ({ key: r.key, value: r.value, partition: p, headers: Object.fromEntries(r.headers) })) });
        assert.equal(res.errorCode, 0);
        batch.forEach((r, i) => sent.push({ ...r, offset: Number(res.baseOffset) + i }));
      }
    }

    const after = await admin.fetchTopicOffsets(TOPIC);
    for (const o of after) {
      const mine = sent.filter((s) => s.partition === o.partition);
      if (process.env.STRATA_TEST_SKIP_HW_CHECK !== '1') assert.equal(Number(o.high), mine.length, `partition ${o.partition} high watermark`);
      assert.equal(Number(o.low), 0, `partition ${o.partition} low watermark`);
      const offsets = mine.map((s) => s.offset).sort((a, b) => a - b);
      assert.deepEqual(offsets, [...offsets.keys()], `partition ${o.partition} offsets contiguous from 0`);
    }
  } finally {
    await producer.disconnect();
    await admin.disconnect();
  }
  writeFileSync(OUT, JSON.stringify(sent.map((s, index) => ({ index, key: b64(s.key), value: b64(s.value),
    headers: s.headers.map(([k, v]) => [k, b64(v)]), partition: s.partition, offset: s.offset }))));
});
