// Peer of scenario handler-3-fields (a): @kubernetes/client-node's informer,
// made as its README makes one (pod-informer.mjs),
// with an update handler that reads the same three fields.
//
//   node informer.mjs CLIENT_NODE_INDEX_JS KUBECONFIG COUNT
//
// The package is not installed next to this file but into the bench's own
// folder (scripts/benchlib/peers.py), so it is imported by path. Prints the
// `bench synced` and `bench done` lines events.lua prints, with times from
// performance.now() and CPU from process.cpuUsage(), read at the first
// update, every STAMP_EVERY-th and the last, as events.lua reads its clocks.
import { hwmKb, peerArgs, podInformer, startInformer } from './pod-informer.mjs';

const STAMP_EVERY = 256;
const { k8s, kubeconfig, count } = await peerArgs('informer.mjs', 2);

const now = () => performance.now() / 1000;
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };

function emit(name, fields) {
  const parts = ['bench', name];
  for (const key of Object.keys(fields).sort()) {
    const v = fields[key];
    parts.push(`${key}=${Number.isInteger(v) ? v : typeof v === 'number' ? v.toFixed(6) : v}`);
  }
  process.stdout.write(parts.join(' ') + '\n');
}

const started = now();
const informer = podInformer(k8s, kubeconfig, (cached) => emit('synced', { at: now() - started, cached, updates: 0 }));

let seen = 0, stamped = 0, first = 0, cpuFirst = 0, last = 0, cpuLast = 0, connects = 0;
function finish(reason) {
  emit('done', { reason, seen, stamped, first, last, cpu_first: cpuFirst, cpu_last: cpuLast, hwm_kb: hwmKb() });
  process.exit(0);
}

informer.on('update', (obj) => {
  const md = obj.metadata;
  void md.name, md.namespace, obj.status.phase;
  seen += 1;
  if (seen === 1) {
    first = now(); cpuFirst = cpu();
  } else if (seen === count || seen % STAMP_EVERY === 0) {
    stamped = seen; last = now(); cpuLast = cpu();
    if (seen === count) finish('count');
  }
});
// A second connect is the re-watch after the first stream ended: readline has
// delivered every line of that stream by then, so no more of its events come.
informer.on('connect', () => {
  connects += 1;
  if (connects >= 2 && seen < count) finish('stream-ended');
});
await startInformer(informer);
