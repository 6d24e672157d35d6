"""Tests of check_compose.py's image pinning policy. .ci/lint runs them:
python -m unittest deploy/docker/check_compose_test.py (from the repository root)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_compose as cc  # noqa: E402

DIGEST = "@sha256:" + "0123456789abcdef" * 4
REASON = "no registry reachable from the build machine; pinned at release"


class PinningPolicy(unittest.TestCase):
    def test_unlisted_tag_only_image_is_refused(self):
        problems = cc.unpinned([("redis", "redis:7.2.11")], {})
        self.assertEqual(len(problems), 1)
        self.assertIn("'redis:7.2.11' is not pinned by digest", problems[0])

    def test_listed_tag_only_image_is_accepted(self):
        self.assertEqual(cc.unpinned([("redis", "redis:7.2.11")], {"redis:7.2.11": REASON}), [])

    def test_digest_is_accepted_unlisted(self):
        self.assertEqual(cc.unpinned([("redis", "redis:7.2.11" + DIGEST)], {}), [])

    def test_listed_but_pinned_or_unused_is_refused(self):
        problems = cc.unpinned([("redis", "redis:7.2.11" + DIGEST)], {"redis:7.2.11": REASON})
        self.assertEqual(len(problems), 1)
        self.assertIn("nothing uses tag-only any more", problems[0])

    def test_allowlist_needs_a_reason(self):
        listed, problems = cc.read_allowlist("# comment\n\nredis:7.2.11\nmariadb:10.11.19 " + REASON + "\n")
        self.assertEqual(set(listed), {"redis:7.2.11", "mariadb:10.11.19"})
        self.assertEqual(len(problems), 1)
        self.assertIn("redis:7.2.11 has no reason", problems[0])

    def test_dockerfile_images_skip_own_stages_and_scratch(self):
        text = ("FROM golang:1.26.11-bookworm AS build\nRUN true\nFROM build AS test\n"
                "FROM --platform=$BUILDPLATFORM gcr.io/distroless/static-debian12:nonroot\nFROM scratch\n")
        self.assertEqual(cc.dockerfile_images(text),
                         ["golang:1.26.11-bookworm", "gcr.io/distroless/static-debian12:nonroot"])

    def test_jaeger_image_is_the_v2_release_of_the_go_module(self):
        self.assertEqual(cc.jaeger_image("module x\n\ntool github.com/jaegertracing/jaeger/cmd/jaeger\n\n"
                                         "require github.com/jaegertracing/jaeger v1.75.0\n"), "jaegertracing/jaeger:2.12.0")
        self.assertEqual(cc.jaeger_image("require (\n\tgithub.com/jaegertracing/jaeger v1.63.2\n)\n"),
                         "jaegertracing/jaeger:2.0.2")
        self.assertIsNone(cc.jaeger_image("require github.com/jaegertracing/jaeger v1.62.0\n"))
        self.assertIsNone(cc.jaeger_image("require github.com/jaegertracing/jaeger-idl v0.6.0\n"))

    def test_the_repository_keeps_the_policy(self):
        with open(cc.ALLOWLIST) as f:
            listed, problems = cc.read_allowlist(f.read())
        self.assertEqual(problems, [])
        for image, reason in listed.items():
            self.assertEqual(reason, REASON, image)


if __name__ == "__main__":
    unittest.main()
