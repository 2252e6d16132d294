"""Checks of the harness's own parts: the Pod generator, the data set and the server.

Run with `python3 scripts/bench --self-test`; needs neither klua nor kubectl, and takes a second.
"""
import http.client
import json
import shutil
import tempfile
import time
import unittest
from urllib.parse import urlencode

from sandbox import partial as metadata_only

from . import data, pods, server


class PodGenerator(unittest.TestCase):
    def test_pods_average_about_3_1_kilobytes_of_compact_json(self):
        sizes = [len(pods.encode(i, "1000")) for i in range(500)]
        self.assertTrue(2900 <= sum(sizes) / len(sizes) <= 3300, sum(sizes) / len(sizes))

    def test_a_pod_is_the_same_bytes_every_time(self):
        self.assertEqual(pods.encode(42, "7", 3), pods.encode(42, "7", 3))

    def test_pods_spread_over_fifty_namespaces_with_unique_names(self):
        many = [pods.pod(i) for i in range(200)]
        self.assertEqual(len({p["metadata"]["namespace"] for p in many}), 50)
        self.assertEqual(len({p["metadata"]["name"] for p in many}), 200)

    def test_a_pod_has_what_a_real_one_has(self):
        p = pods.pod(7)
        md, spec, status = p["metadata"], p["spec"], p["status"]
        self.assertEqual((p["kind"], p["apiVersion"]), ("Pod", "v1"))
        self.assertIn("app", md["labels"])
        applied = json.loads(md["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
        self.assertEqual(applied["metadata"]["name"], md["name"])
        self.assertEqual(md["ownerReferences"][0]["kind"], "ReplicaSet")
        self.assertEqual(len(md["managedFields"]), 2)
        self.assertTrue(all(isinstance(m["fieldsV1"], dict) and m["fieldsV1"] for m in md["managedFields"]))
        self.assertEqual(len(spec["containers"]), 2)
        for c in spec["containers"]:
            self.assertTrue(c["env"] and c["ports"] and c["resources"] and c["volumeMounts"])
        self.assertEqual(status["phase"], "Running")
        self.assertTrue(status["conditions"] and status["podIPs"])
        self.assertEqual(len(status["containerStatuses"]), 2)
        # Required in the API: the Python client's V1ContainerStatus refuses a status without it.
        for c in status["containerStatuses"]:
            self.assertRegex(c["imageID"], r"^registry\.example\.com/[a-z-]+@sha256:[0-9a-f]{64}$")

    def test_a_kubelet_update_changes_the_status_and_keeps_the_identity(self):
        before, after = pods.pod(3, "5", 0), pods.pod(3, "1005", 1)
        self.assertEqual(before["metadata"]["uid"], after["metadata"]["uid"])
        self.assertNotEqual(before["status"], after["status"])
        self.assertEqual(after["metadata"]["resourceVersion"], "1005")


class ServerFixture(unittest.TestCase):
    PODS, WATCH_PODS, EVENTS = 120, 60, 300
    PAGINATE, WATCH_END = "auto", "close"
    BY_NAMESPACE = False
    WATCH_RATE = 0.0
    WRITE_ALSO = None  # data.write_added or write_partial: a file of the data set sent as it is

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="klua-bench-selftest-")
        cls.dataset = data.generate(cls.tmp, cls.PODS, cls.WATCH_PODS, cls.EVENTS, cls.BY_NAMESPACE)
        if cls.WRITE_ALSO:
            cls.WRITE_ALSO(cls.tmp, cls.PODS)
            cls.dataset = data.Dataset(cls.tmp)
        cls.config = server.Config(cls.dataset, cls.PODS, cls.EVENTS, cls.PAGINATE, cls.WATCH_END,
                                   watch_rate=cls.WATCH_RATE)
        cls.server = server.Server(cls.config)
        cls.thread = cls.server.start()

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()
        cls.config.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def request(self, path, headers=None, **query):
        conn = http.client.HTTPConnection(*self.server.server_address[:2], timeout=10)
        conn.request("GET", path + ("?" + urlencode(query) if query else ""), headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        return resp, body

    def get_json(self, path, **query):
        resp, body = self.request(path, **query)
        return resp.status, json.loads(body)

    def list_all(self, path, **query):
        """Every page of a list, following continue tokens; (items, pages)."""
        items, pages = [], 0
        while True:
            code, body = self.get_json(path, **query)
            self.assertEqual(code, 200)
            items += body["items"]
            pages += 1
            if not body["metadata"].get("continue"):
                return items, pages
            query["continue"] = body["metadata"]["continue"]

    def watch_lines(self, path, **query):
        resp, body = self.request(path, watch="true", **query)
        self.assertEqual(resp.getheader("Transfer-Encoding"), "chunked")
        return [json.loads(line) for line in body.splitlines()]


class Server(ServerFixture):
    def test_discovery_describes_pods(self):
        self.assertEqual(self.get_json("/api")[1]["versions"], ["v1"])
        resources = self.get_json("/api/v1")[1]["resources"]
        self.assertEqual(resources[0]["name"], "pods")
        self.assertEqual(resources[0]["shortNames"], ["po"])
        self.assertTrue(resources[0]["namespaced"])
        self.assertEqual(self.get_json("/apis")[1]["groups"], [])
        self.assertEqual(self.get_json("/version")[0], 200)

    def test_openapi_is_not_found(self):
        self.assertEqual(self.request("/openapi/v2")[0].status, 404)
        self.assertEqual(self.request("/openapi/v3")[0].status, 404)

    def test_a_list_from_resource_version_0_is_one_page_whatever_the_limit(self):
        code, body = self.get_json("/api/v1/pods", limit=50, resourceVersion="0")
        self.assertEqual(len(body["items"]), self.PODS)
        self.assertEqual(body["metadata"], {"resourceVersion": "1000"})

    def test_other_lists_are_paged_by_limit(self):
        items, pages = self.list_all("/api/v1/pods", limit=50)
        self.assertEqual(pages, 3)
        self.assertEqual([p["metadata"]["name"] for p in items], [self.dataset.pod_name(i) for i in range(self.PODS)])

    def test_a_namespace_lists_only_its_pods(self):
        items, _ = self.list_all("/api/v1/namespaces/team-03/pods", limit=1)
        self.assertEqual(len(items), len(range(3, self.PODS, 50)))
        self.assertEqual({p["metadata"]["namespace"] for p in items}, {"team-03"})
        self.assertEqual(self.list_all("/api/v1/namespaces/elsewhere/pods")[0], [])

    def test_a_bad_continue_token_is_expired(self):
        self.assertEqual(self.get_json("/api/v1/pods", limit=5, **{"continue": "%%%"})[0], 410)

    def test_a_watch_from_the_list_streams_every_event_with_increasing_resource_versions(self):
        events = self.watch_lines("/api/v1/pods", resourceVersion="1000")
        self.assertEqual(len(events), self.EVENTS)
        self.assertEqual({e["type"] for e in events}, {"MODIFIED"})
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        self.assertEqual(rvs, list(range(1001, 1001 + self.EVENTS)))
        listed = {p["metadata"]["name"] for p in self.get_json("/api/v1/pods")[1]["items"]}
        self.assertTrue({e["object"]["metadata"]["name"] for e in events} <= listed)

    def test_a_watch_resumes_after_its_resource_version(self):
        events = self.watch_lines("/api/v1/pods", resourceVersion="1250")
        self.assertEqual(events[0]["object"]["metadata"]["resourceVersion"], "1251")
        self.assertEqual(len(events), self.EVENTS - 250)

    def test_a_watch_with_nothing_left_waits_for_its_timeout(self):
        self.assertEqual(self.watch_lines("/api/v1/pods", resourceVersion="1300", timeoutSeconds=0.2), [])

    def test_a_namespaced_watch_sees_only_its_namespace(self):
        events = self.watch_lines("/api/v1/namespaces/team-07/pods", resourceVersion="1000")
        self.assertTrue(events)
        self.assertEqual({e["object"]["metadata"]["namespace"] for e in events}, {"team-07"})

    def test_a_watch_list_sends_every_pod_as_added_then_the_initial_events_end_bookmark_then_the_events(self):
        events = self.watch_lines("/api/v1/pods", sendInitialEvents="true", allowWatchBookmarks="true",
                                  resourceVersionMatch="NotOlderThan", resourceVersion="")
        added, bookmark, rest = events[:self.PODS], events[self.PODS], events[self.PODS + 1:]
        self.assertEqual({e["type"] for e in added}, {"ADDED"})
        self.assertEqual([e["object"] for e in added], self.get_json("/api/v1/pods")[1]["items"])
        self.assertEqual(bookmark, {"type": "BOOKMARK", "object": {
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"resourceVersion": "1000", "annotations": {"k8s.io/initial-events-end": "true"}}}})
        self.assertEqual(rest, self.watch_lines("/api/v1/pods", resourceVersion="1000"))

    def test_a_namespaced_watch_list_sends_the_namespace_s_pods(self):
        events = self.watch_lines("/api/v1/namespaces/team-03/pods", sendInitialEvents="true",
                                  allowWatchBookmarks="true", resourceVersionMatch="NotOlderThan")
        n = len(range(3, self.PODS, 50))
        self.assertEqual([e["object"] for e in events[:n]], self.list_all("/api/v1/namespaces/team-03/pods")[0])
        self.assertEqual(events[n]["type"], "BOOKMARK")
        self.assertEqual(events[n + 1:], self.watch_lines("/api/v1/namespaces/team-03/pods", resourceVersion="1000"))

    def test_a_watch_list_without_not_older_than_or_bookmarks_is_invalid_as_kube_apiserver_answers(self):
        for query in ({"sendInitialEvents": "true", "allowWatchBookmarks": "true"},
                      {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}):
            code, body = self.get_json("/api/v1/pods", watch="true", **query)
            self.assertEqual((code, body["reason"]), (422, "Invalid"), query)

    def test_a_pod_can_be_read_by_name(self):
        name = self.dataset.pod_name(53)
        code, body = self.get_json("/api/v1/namespaces/team-03/pods/" + name)
        self.assertEqual((code, body["metadata"]["name"]), (200, name))
        self.assertEqual(self.get_json("/api/v1/namespaces/team-04/pods/" + name)[0], 404)

    def test_the_kubeconfig_points_at_the_server_without_credentials(self):
        text = server.kubeconfig_text(self.server.url)
        self.assertIn("server: %s\n" % self.server.url, text)
        self.assertIn("user: {}", text)


class ByNamespace(ServerFixture):
    """The data set of many-informers: a namespace's watch is sent from the grouped file."""
    PODS, WATCH_PODS, EVENTS = 120, 20, 300
    BY_NAMESPACE = True

    def test_a_namespaced_watch_sends_the_same_events_as_gathered_from_the_stream(self):
        self.assertIsNotNone(self.config.by_namespace_fd)
        for ns, rv in ((7, 1000), (3, 1000), (3, 1150), (19, 1000)):
            resp, body = self.request("/api/v1/namespaces/team-%02d/pods" % ns, watch="true", resourceVersion=str(rv))
            expected = b"".join(self.config.events_map[slice(*self.event_bytes(k))]
                                for k in range(rv - data.LIST_RV, self.EVENTS)
                                if data.namespace_of_event(k, self.WATCH_PODS) == ns)
            self.assertTrue(expected)
            self.assertEqual(body, expected)

    def event_bytes(self, k):
        offset, length = self.dataset.event_span(k, k + 1)
        return offset, offset + length


class AddedFile(ServerFixture):
    """A data set with added.ndjson: a watch-list's ADDED events are sent from it, the same bytes."""

    WRITE_ALSO = staticmethod(data.write_added)

    def test_the_initial_events_come_from_the_file_and_are_the_listed_pods(self):
        self.assertIsNotNone(self.config.added_fd)
        resp, body = self.request("/api/v1/pods", watch="true", sendInitialEvents="true",
                                  allowWatchBookmarks="true", resourceVersionMatch="NotOlderThan")
        lines = body.splitlines()
        listed = self.get_json("/api/v1/pods")[1]["items"]
        self.assertEqual([json.loads(line)["object"] for line in lines[:self.PODS]], listed)
        self.assertEqual(json.loads(lines[self.PODS])["type"], "BOOKMARK")


METADATA_LIST = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}


class PartialFile(ServerFixture):
    """A data set with partial.json: a metadata-only LIST's items are sent from it, and they are
    what the sandbox's conversion (scripts/sandbox/partial.py) makes of the full LIST, byte for
    byte, as is the answer of a server that converts each Pod as it is asked."""

    WRITE_ALSO = staticmethod(data.write_partial)

    def test_the_items_come_from_the_file_and_are_the_sandbox_s_conversion_of_the_listed_pods(self):
        self.assertIsNotNone(self.config.partial_fd)
        _, full = self.request("/api/v1/pods")
        resp, body = self.request("/api/v1/pods", headers=METADATA_LIST)
        self.assertEqual(resp.status, 200)
        self.assertEqual(body.decode(), metadata_only.convert(None, ("PartialObjectMetadataList", "v1"), full))

    def test_a_page_and_a_namespace_are_converted_alike(self):
        for path, query in (("/api/v1/pods", {"limit": 7}), ("/api/v1/namespaces/team-03/pods", {})):
            _, full = self.request(path, **query)
            _, body = self.request(path, headers=METADATA_LIST, **query)
            self.assertEqual(body.decode(), metadata_only.convert(None, ("PartialObjectMetadataList", "v1"), full))


class PagingAlways(ServerFixture):
    PAGINATE = "always"

    def test_even_resource_version_0_lists_are_paged(self):
        items, pages = self.list_all("/api/v1/pods", limit=50, resourceVersion="0")
        self.assertEqual((len(items), pages), (self.PODS, 3))


class WatchHeldOpen(ServerFixture):
    WATCH_END = "hold"

    def test_the_stream_stays_open_after_its_events_until_the_timeout(self):
        events = self.watch_lines("/api/v1/pods", resourceVersion="1000", timeoutSeconds=0.2)
        self.assertEqual(len(events), self.EVENTS)


class Paced(ServerFixture):
    EVENTS, WATCH_RATE = 40, 400.0

    def test_a_paced_watch_writes_each_event_in_its_turn_stamped_with_its_send_time(self):
        clocks = (time.CLOCK_MONOTONIC, time.CLOCK_BOOTTIME)
        before = [time.clock_gettime(c) for c in clocks]
        events = self.watch_lines("/api/v1/pods", resourceVersion="1000")
        after = [time.clock_gettime(c) for c in clocks]
        self.assertEqual(len(events), self.EVENTS)
        annotations = [e["object"]["metadata"]["annotations"] for e in events]
        self.assertEqual([int(a["klua.bench/seq"]) for a in annotations], list(range(self.EVENTS)))
        for n, name in enumerate(("klua.bench/sent-monotonic", "klua.bench/sent-boottime")):
            sent = [float(a[name]) for a in annotations]
            self.assertTrue(before[n] <= sent[0] and sent[-1] <= after[n], (before[n], sent, after[n]))
            # Event i is written no sooner than i / rate after the watch began, which was after `before`.
            for i, at in enumerate(sent):
                self.assertGreaterEqual(at - before[n], i / self.WATCH_RATE, i)
        # Otherwise each event is the data set's own.
        plain = server.Config(self.dataset, self.PODS, self.EVENTS)
        try:
            for k, event in enumerate(events):
                for key in ("klua.bench/seq", "klua.bench/sent-monotonic", "klua.bench/sent-boottime"):
                    del event["object"]["metadata"]["annotations"][key]
                offset, length = self.dataset.event_span(k, k + 1)
                self.assertEqual(event, json.loads(plain.events_map[offset:offset + length]))
        finally:
            plain.close()


def main():
    suite = unittest.defaultTestLoader.loadTestsFromName(__name__)
    return 0 if unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful() else 1
