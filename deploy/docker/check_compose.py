"""Checks docker-compose.yml for what the Compose schema cannot know about this project.

Run by .ci/lint after the schema check: python check_compose.py docker-compose.yml deploy/local/stack
Each rule is a promise made in docker-compose.yml's comments or in the README.
It also holds the image pinning policy (issue 39: images pinned by tag, not digest): every
third-party image of docker-compose.yml and deploy/docker/Dockerfile carries @sha256:<digest>
unless deploy/images-unpinned.txt lists it with its reason (check_compose_test.py tests it).
"""

import os
import re
import sys

from ruamel.yaml import YAML

SECKILL_IMAGE = re.compile(r"^seckill:")
# The oldest Redis line upstream still patches (its release notes name the supported lines);
# raise it when a line reaches its end of life.
REDIS_OLDEST_MAINTAINED = (7, 2)
PINNED = re.compile(r"^[^:@]+:\d+\.\d+\.\d+(-[\w.]+)?$|@sha256:[0-9a-f]{64}$")


DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
ALLOWLIST = os.path.join(ROOT, "deploy", "images-unpinned.txt")
DOCKERFILE = os.path.join(ROOT, "deploy", "docker", "Dockerfile")


def read_allowlist(text):
    """deploy/images-unpinned.txt: "IMAGE REASON" lines -> {image: reason}, and its problems."""
    listed, problems = {}, []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        image, _, reason = line.partition(" ")
        if not reason.strip():
            problems.append(f"images-unpinned.txt line {n}: {image} has no reason")
        elif DIGEST.search(image):
            problems.append(f"images-unpinned.txt line {n}: {image} is pinned: remove its line")
        listed[image] = reason.strip()
    return listed, problems


def dockerfile_images(text):
    """The images the Dockerfile's FROM lines pull (not its own stages, nor scratch)."""
    images, stages = [], set()
    for m in re.finditer(r"^FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", text, re.M | re.I):
        if m.group(1) not in stages and m.group(1) != "scratch":
            images.append(m.group(1))
        if m.group(2):
            stages.add(m.group(2))
    return images


def unpinned(used, listed):
    """Problems: a used third-party image (where, image) without a digest and not listed, and a
    listed image no longer used tag-only (the list must shrink as the release pins them)."""
    problems, tag_only = [], set()
    for where, image in used:
        if DIGEST.search(image):
            continue
        tag_only.add(image)
        if image not in listed:
            problems.append(f"{where}: image {image!r} is not pinned by digest (@sha256:...) and not listed in "
                            "deploy/images-unpinned.txt with its reason (docs/deployment.md, pinning images)")
    for image in sorted(set(listed) - tag_only):
        problems.append(f"deploy/images-unpinned.txt lists {image!r}, which nothing uses tag-only any more: remove its line")
    return problems


# Jaeger ships each release twice from one tag pair: v1.N.P of its Go module (whose cmd/jaeger
# deploy/jaeger builds) and v2.(N-63).P of the v2 binary and image; v1.63.0 / v2.0.0 was the
# first pair (its CHANGELOG heads each release "v1.N.P / v2.M.P").
JAEGER_V1_OF_V2_0 = 63
JAEGER_GOMOD = os.path.join(ROOT, "deploy", "jaeger", "go.mod")


def jaeger_image(gomod_text):
    """The jaegertracing/jaeger image of the release deploy/jaeger/go.mod requires, or None."""
    m = re.search(r"^\s*(?:require\s+)?github\.com/jaegertracing/jaeger v1\.(\d+)\.(\d+)\b", gomod_text, re.M)
    if not m or int(m.group(1)) < JAEGER_V1_OF_V2_0:
        return None
    return f"jaegertracing/jaeger:2.{int(m.group(1)) - JAEGER_V1_OF_V2_0}.{m.group(2)}"


def seconds(d):
    """Compose durations as used here: 15s, 1m30s, 500ms."""
    total = 0.0
    for n, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", str(d)):
        total += float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total


def main(compose_path, stack_path):
    with open(compose_path) as f:
        doc = YAML(typ="safe").load(f)
    with open(stack_path) as f:
        kafka_version = re.search(r"^KAFKA_VERSION=(\S+)$", f.read(), re.M).group(1)
    services = doc["services"]
    problems = []

    def check(ok, msg):
        if not ok:
            problems.append(msg)

    for name, svc in services.items():
        image = svc.get("image", "")
        if SECKILL_IMAGE.match(image):
            continue
        check(PINNED.search(image), f"{name}: image {image!r} is not pinned to a full version (x.y.z) or a digest")

    # Third-party images: by digest, or listed with the reason they are not yet.
    with open(ALLOWLIST) as f:
        listed, list_problems = read_allowlist(f.read())
    problems += list_problems
    with open(DOCKERFILE) as f:
        used = [("deploy/docker/Dockerfile", image) for image in dockerfile_images(f.read())]
    used += [(name, svc["image"]) for name, svc in services.items()
             if svc.get("image") and not SECKILL_IMAGE.match(svc["image"])]
    problems += unpinned(used, listed)

    builders = [n for n, s in services.items() if "build" in s]
    check(len(builders) == 1, f"one service builds the image, found {builders}")
    ours = {s.get("image") for s in services.values() if SECKILL_IMAGE.match(s.get("image", ""))}
    check(len(ours) == 1, f"every service of ours runs one image, found {sorted(ours)}")
    for name, svc in services.items():
        if SECKILL_IMAGE.match(svc.get("image", "")) and name not in builders:
            check(svc.get("pull_policy") == "never", f"{name}: pull_policy never (the image is built here, not pulled)")

    # A service without a memory limit can take the host down with it; ours also size Go's
    # soft memory limit from it (pkg/memlimit: SECKILL_MEMLIMIT_RATIO of the cgroup's limit).
    for name, svc in services.items():
        if SECKILL_IMAGE.match(svc.get("image", "")):
            limits = ((svc.get("deploy") or {}).get("resources") or {}).get("limits") or {}
            check(limits.get("memory") or svc.get("mem_limit"),
                  f"{name}: no memory limit (deploy.resources.limits.memory)")

    kafka = services["kafka"]["image"]
    check(DIGEST.sub("", kafka) == f"apache/kafka:{kafka_version}",
          f"kafka image {kafka!r} differs from the broker the tests run (Kafka {kafka_version} in {stack_path})")
    check(not any("GROUP_INITIAL_REBALANCE_DELAY" in k for k in services["kafka"].get("environment", {})),
          "kafka: group.initial.rebalance.delay.ms must keep its default (stock server settings are the test target)")
    topics = services["kafka-topics"]
    check(topics.get("command", [None])[0] == "kafkainit", "kafka-topics: topics are created by kafkainit, as in the local stack")

    # Tracing is opt-in: Jaeger only in the "tracing" profile, the release the local stack
    # builds (deploy/jaeger/go.mod), so both paths show the same UI and API.
    jaeger = services.get("jaeger")
    if jaeger is not None:
        with open(JAEGER_GOMOD) as f:
            want = jaeger_image(f.read())
        check(want and DIGEST.sub("", jaeger.get("image", "")) == want,
              f"jaeger image {jaeger.get('image')!r} is not {want!r}, the release deploy/jaeger/go.mod builds")
        check(jaeger.get("profiles") == ["tracing"], "jaeger: only in the tracing profile (profiles: [tracing])")

    db = services.get("mariadb")
    check(db is not None and re.match(r"^mariadb:10\.11\.", db.get("image", "")),
          "the database is MariaDB 10.11, the server the tests run against")
    text = open(compose_path).read()
    check(not re.search(r"collation[-_]server|character[-_]set[-_]server", text),
          "no server-wide collation or charset: the schema pins utf8mb4_bin itself")

    # Upstream patches only its newest lines; 7.0 and older get no security fixes any more.
    # (The local stack runs Debian 12's 7.0.15, which Debian's security team patches; an
    # upstream image of an ended line is patched by nobody.)
    redis = re.match(r"^redis:(\d+)\.(\d+)\.", services["redis"]["image"])
    check(redis and (int(redis.group(1)), int(redis.group(2))) >= REDIS_OLDEST_MAINTAINED,
          f"redis image {services['redis']['image']!r} is of an end-of-life line (maintained: "
          f"{'.'.join(map(str, REDIS_OLDEST_MAINTAINED))} and newer)")
    redis_cmd = [str(a) for a in services["redis"].get("command", [])]
    check("--maxmemory" in redis_cmd, "redis: --maxmemory is set")
    check("noeviction" in redis_cmd, "redis: --maxmemory-policy noeviction")

    gw = services["gateway"]
    timeout = seconds(gw["environment"].get("SECKILL_SHUTDOWN_TIMEOUT", "15s"))
    grace = seconds(gw.get("stop_grace_period", "10s"))
    check(grace >= 2 * timeout + 5,
          f"gateway: stop_grace_period {grace:g}s < 2 x SECKILL_SHUTDOWN_TIMEOUT ({timeout:g}s) + 5s margin")
    for name in ("gateway", "consumer", "reconciler", "migrate"):
        env = services[name].get("environment", {})
        for k, v in env.items():
            if k in ("SECKILL_ADMIN_TOKEN", "SECKILL_JWT_SECRET"):
                check(re.fullmatch(r"\$\{%s:-\}" % k, str(v)),
                      f"{name}: {k} comes from .env without failing other commands when unset")

    for p in problems:
        print(f"{compose_path}: {p}")
    if problems:
        return 1
    print(f"{compose_path}: project rules ok ({len(services)} services; Kafka {kafka_version} as tested)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
