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
