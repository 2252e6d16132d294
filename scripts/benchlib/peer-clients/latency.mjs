// Peer of scenario latency: @kubernetes/client-node's informer, made as
// informer.mjs makes it (pod-informer.mjs), on a stream of changes that bench-server
// (--watch-rate) stamps with the time it wrote each one. client-node has no
// work queue or reconcile, so the update handler is where its user first
// sees a change: it records process.hrtime (CLOCK_MONOTONIC) minus the Pod's
// klua.bench/sent-monotonic annotation.
//
//   node latency.mjs CLIENT_NODE_INDEX_JS KUBECONFIG COUNT
//
// Prints, as latency.lua does, `bench done` with every latency once the
// change numbered COUNT - 1 (klua.bench/seq) has been handled.
import { hwmKb, peerArgs, podInformer, startInformer } from './pod-informer.mjs';

const { k8s, kubeconfig, count } = await peerArgs('latency.mjs', 1);
const now = () => Number(process.hrtime.bigint()) / 1e9;

const started = now();
const informer = podInformer(k8s, kubeconfig, (cached) => {
  process.stdout.write(`bench synced at=${(now() - started).toFixed(6)} cached=${cached}\n`);
});

// Numbers, formatted once at the end, as latency.lua keeps them.
const latencies = [];
informer.on('update', (obj) => {
  const annotations = obj.metadata.annotations || {};
  const sent = annotations['klua.bench/sent-monotonic'];
  if (sent === undefined) return;
  latencies.push(now() - Number(sent));
  if (Number(annotations['klua.bench/seq']) === count - 1) {
    process.stdout.write(`bench done hwm_kb=${hwmKb()} initial=0 latencies=${latencies.map((l) => l.toFixed(6)).join(',')} `
      + `reconciled=${latencies.length}\n`, () => process.exit(0));
  }
});
await startInformer(informer);
