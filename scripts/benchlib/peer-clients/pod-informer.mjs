// What the client-node peers share: their arguments, the Pod informer, how
// it is started and the peak memory they report.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

// The arguments of a peer, CLIENT_NODE_INDEX_JS KUBECONFIG COUNT: client-node
// imported from the first, the kubeconfig and the count. A usage line naming
// script, and exit status 2, when one is missing or COUNT is below least.
export async function peerArgs(script, least) {
  const [modulePath, kubeconfig, countArg] = process.argv.slice(2);
  const count = Number(countArg);
  if (!modulePath || !kubeconfig || !(count >= least)) {
    console.error(`usage: node ${script} CLIENT_NODE_INDEX_JS KUBECONFIG COUNT (COUNT >= ${least})`);
    process.exit(2);
  }
  return { k8s: await import(pathToFileURL(modulePath).href), kubeconfig, count };
}

// The process's peak resident set size in kB (VmHWM), as the klua side reports it.
export const hwmKb = () => Number((readFileSync('/proc/self/status', 'utf8').match(/^VmHWM:\s+(\d+) kB$/m) || [0, 0])[1]);

// Starts informer; an error it reports ends the peer with status 1, which the
// bench reads as a run that failed.
export async function startInformer(informer) {
  informer.on('error', (err) => {
    console.error('informer error:', err && (err.stack || err));
    process.exit(1);
  });
  await informer.start();
}

// The Pod informer of the client-node peers, made as client-node's README
// makes one: makeInformer over listPodForAllNamespaces, from a kubeconfig.
// onListed(items) is told each list's size when it arrives.
export function podInformer(k8s, kubeconfig, onListed) {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  // client-node refuses a plain http:// server unless TLS verification is off,
  // and the bench server speaks no TLS (neither does any peer's connection).
  kc.loadFromOptions({
    clusters: kc.clusters.map((c) => ({ ...c, skipTLSVerify: true })),
    users: kc.users, contexts: kc.contexts, currentContext: kc.getCurrentContext(),
  });
  const api = kc.makeApiClient(k8s.CoreV1Api);
  return k8s.makeInformer(kc, '/api/v1/pods', async () => {
    const list = await api.listPodForAllNamespaces();
    onListed(list.items.length);
    return list;
  });
}
