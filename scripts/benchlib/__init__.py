"""klua's benchmark harness: a fast fake API server, realistic Pods and the scenarios `make bench` runs."""
