"""The klua sandbox API server: an in-memory stand-in for kube-apiserver."""
