#!/usr/bin/env bash
# deploy/local/stack_test.sh: tests deploy/local/stack's installation step and its error
# reporting without touching the machine: the script is sourced (its guard keeps it from
# running a command), POLICY_RC_D points into a temporary folder, and PATH holds only fake
# apt-get, id and server commands. `make lint` (part of `make test`) runs it.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

# make test exports SECKILL_WITH_CHROMIUM=1 and SECKILL_TRACING=1 to its prerequisites (lint
# among them); each case sets them itself.
unset SECKILL_WITH_CHROMIUM SECKILL_TRACING
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The machine's tools, behind the fakes of the port cases.
MACHINE_PATH=$PATH
STACK=$HERE/stack
TMP=$(mktemp -d)
# The listeners the port cases start are stopped by their PIDs (each also ends by itself).
listeners=()
cleanup() {
	local pid
	for pid in "${listeners[@]}"; do kill "$pid" 2>/dev/null || true; done
	rm -rf "$TMP"
}
trap cleanup EXIT

passed=0
failed=0
ok() { passed=$((passed + 1)); printf 'ok   %s\n' "$1"; }
fail() {
	failed=$((failed + 1))
	printf 'FAIL %s: %s\n' "$1" "$2"
	if [[ -f $CASE/out ]]; then sed 's/^/     | /' "$CASE/out"; fi
}

# setup NAME UID CMD...: a fresh case folder whose bin/ holds fake id (printing UID), a fake
# apt-get and a fake of each CMD, plus the few real tools the installation uses.
setup() {
	CASE=$TMP/$1
	mkdir -p "$CASE/bin"
	local uid=$2
	shift 2
	printf '#!/bin/sh\necho %s\n' "$uid" >"$CASE/bin/id"
	# apt-get records each call and, on install, whether a policy-rc.d was in place and what
	# it answered; FAKE_APT_FAIL makes the install fail.
	cat >"$CASE/bin/apt-get" <<-'EOF'
		#!/bin/sh
		echo "apt-get $*" >>"$CASE/apt.log"
		if [ "$1" = install ]; then
			if [ -x "$POLICY_RC_D" ]; then
				"$POLICY_RC_D" redis-server start
				echo "policy-rc.d answered $?" >>"$CASE/apt.log"
				cp "$POLICY_RC_D" "$CASE/policy-during-install"
			else
				echo "no policy-rc.d" >>"$CASE/apt.log"
			fi
			[ -z "${FAKE_APT_FAIL:-}" ] || exit 100
		fi
		exit 0
	EOF
	local c
	for c in "$@"; do printf '#!/bin/sh\nexit 0\n' >"$CASE/bin/$c"; done
	for c in chmod rm cp sh; do ln -s "$(command -v "$c")" "$CASE/bin/$c"; done
	chmod +x "$CASE"/bin/*
	: >"$CASE/apt.log"
}

# install FN: runs FN from the sourced stack script in a subshell with only the fakes on
# PATH; output in $CASE/out, exit code in $RC.
install() {
	RC=0
	(
		# shellcheck source=stack
		source "$STACK"
		export CASE POLICY_RC_D=$CASE/policy-rc.d
		PATH=$CASE/bin
		"$1"
	) >"$CASE/out" 2>&1 || RC=$?
}

servers=(redis-server mariadbd mariadb mariadb-backup java mvn curl chromium)

case_name="all packages present: apt-get is not called"
setup present 0 go "${servers[@]}"
install install_packages
if ((RC != 0)); then fail "$case_name" "exit $RC"
elif [[ -s $CASE/apt.log ]]; then fail "$case_name" "apt-get called: $(<"$CASE/apt.log")"
else ok "$case_name"; fi

case_name="packages absent, no policy-rc.d: one is in place during the install and gone after"
setup absent-nopolicy 0 go java mvn curl chromium
install install_packages
want="apt-get update -qq
apt-get install -y -qq --no-install-recommends redis-server mariadb-server mariadb-client mariadb-backup
policy-rc.d answered 101"
if ((RC != 0)); then fail "$case_name" "exit $RC"
elif [[ $(<"$CASE/apt.log") != "$want" ]]; then fail "$case_name" "apt-get log: $(<"$CASE/apt.log")"
elif [[ -e $CASE/policy-rc.d ]]; then fail "$case_name" "policy-rc.d left behind"
else ok "$case_name"; fi

case_name="packages absent, existing policy-rc.d: used and left exactly as it was"
setup absent-policy 0 go redis-server mariadbd mariadb mariadb-backup java curl chromium
printf '#!/bin/sh\n# the machine'"'"'s own\nexit 101\n' >"$CASE/policy-rc.d"
chmod 755 "$CASE/policy-rc.d"
cp "$CASE/policy-rc.d" "$CASE/policy-before"
install install_packages
if ((RC != 0)); then fail "$case_name" "exit $RC"
elif ! grep -q 'install -y -qq --no-install-recommends maven$' "$CASE/apt.log"; then fail "$case_name" "apt-get log: $(<"$CASE/apt.log")"
elif ! cmp -s "$CASE/policy-before" "$CASE/policy-during-install"; then fail "$case_name" "policy-rc.d replaced during the install"
elif ! cmp -s "$CASE/policy-before" "$CASE/policy-rc.d" || [[ ! -x $CASE/policy-rc.d ]]; then fail "$case_name" "policy-rc.d changed or removed"
else ok "$case_name"; fi

case_name="packages absent, not root: refuses, names the packages, installs nothing"
setup notroot 1000 go redis-server mariadbd mariadb mariadb-backup java mvn chromium
install install_packages
if ((RC == 0)); then fail "$case_name" "exit 0"
elif ! grep -q 'missing curl; run as root or install them: apt-get install curl' "$CASE/out"; then fail "$case_name" "message"
elif [[ -s $CASE/apt.log ]]; then fail "$case_name" "apt-get called"
else ok "$case_name"; fi

case_name="apt-get install fails: says so, and the policy-rc.d it created is removed"
setup aptfails 0 go redis-server mariadbd mariadb mariadb-backup java chromium
export FAKE_APT_FAIL=1
install install_packages
unset FAKE_APT_FAIL
if ((RC == 0)); then fail "$case_name" "exit 0"
elif ! grep -q 'apt-get install maven curl exited 100' "$CASE/out"; then fail "$case_name" "message"
elif [[ -e $CASE/policy-rc.d ]]; then fail "$case_name" "policy-rc.d left behind"
else ok "$case_name"; fi

case_name="chromium missing, not asked for (make run): not installed, a non-root user is not refused"
setup nochromium-run 1000 go redis-server mariadbd mariadb mariadb-backup java mvn curl
install install_packages
if ((RC != 0)); then fail "$case_name" "exit $RC"
elif [[ -s $CASE/apt.log ]]; then fail "$case_name" "apt-get called: $(<"$CASE/apt.log")"
else ok "$case_name"; fi

case_name="chromium missing, SECKILL_WITH_CHROMIUM=1 (make test): installed with the servers present"
setup nochromium 0 go redis-server mariadbd mariadb mariadb-backup java mvn curl
export SECKILL_WITH_CHROMIUM=1
install install_packages
unset SECKILL_WITH_CHROMIUM
if ((RC != 0)); then fail "$case_name" "exit $RC"
elif ! grep -q 'install -y -qq --no-install-recommends chromium$' "$CASE/apt.log"; then fail "$case_name" "apt-get log: $(<"$CASE/apt.log")"
else ok "$case_name"; fi

case_name="Go missing: refuses with a message"
setup nogo 0 "${servers[@]}"
install install_packages
if ((RC == 0)); then fail "$case_name" "exit 0"
elif ! grep -q 'Go is required' "$CASE/out"; then fail "$case_name" "message"
else ok "$case_name"; fi

case_name="sourcing runs no command"
CASE=$TMP/source
mkdir -p "$CASE"
RC=0
# shellcheck source=stack
(SECKILL_STATE_DIR=$CASE/state source "$STACK") >"$CASE/out" 2>&1 || RC=$?
if ((RC != 0)); then fail "$case_name" "exit $RC"
elif [[ -s $CASE/out || -e $CASE/state ]]; then fail "$case_name" "printed or created something"
else ok "$case_name"; fi

case_name="a failing command is named with its line"
CASE=$TMP/errtrap
mkdir -p "$CASE"
RC=0
bash -c 'source "$1"; false' _ "$STACK" >"$CASE/out" 2>&1 || RC=$?
if ((RC == 0)); then fail "$case_name" "exit 0"
elif ! grep -q "^\[stack\] ERROR: line 1: 'false' exited 1$" "$CASE/out"; then fail "$case_name" "message"
else ok "$case_name"; fi

case_name="kafka_log4j2 (every profile's brokers): the logging file, into the broker's folder"
CASE=$TMP/log4j2
mkdir -p "$CASE/kafka"
RC=0
bash -c 'source "$1"; kafka_log4j2 "$2"' _ "$STACK" "$CASE/kafka" >"$CASE/out" 2>&1 || RC=$?
if ((RC != 0)); then fail "$case_name" "exit $RC"
elif ! grep -qx "appender.file.fileName = $CASE/kafka/server.log" "$CASE/kafka/log4j2.properties"; then
	fail "$case_name" "no server.log in $CASE/kafka"
elif grep -q $'^[\t ]' "$CASE/kafka/log4j2.properties" || [[ $(grep -c ' = ' "$CASE/kafka/log4j2.properties") != 12 ]]; then
	fail "$case_name" "not the 12 unindented settings"
else ok "$case_name"; fi

case_name="kafka_cluster_id: 22 base64url characters, never a leading '-' (kafka-storage would read an option)"
CASE=$TMP/clusterid
mkdir -p "$CASE"
RC=0
bash -c 'source "$1"; for _ in $(seq 400); do kafka_cluster_id; done' _ "$STACK" >"$CASE/out" 2>&1 || RC=$?
if ((RC != 0)); then fail "$case_name" "exit $RC"
elif [[ $(wc -l <"$CASE/out") != 400 ]] || grep -qvE '^[A-Za-z0-9_-]{22}$' "$CASE/out"; then fail "$case_name" "not 400 ids of 22 base64url characters"
elif grep -q '^-' "$CASE/out"; then fail "$case_name" "an id starts with '-'"
else ok "$case_name"; fi

case_name="an unknown command prints the usage and exits 2"
CASE=$TMP/usage
mkdir -p "$CASE"
RC=0
"$STACK" bogus >"$CASE/out" 2>&1 || RC=$?
if ((RC != 2)); then fail "$case_name" "exit $RC"
elif ! grep -q '^usage: .*up|down|status|env' "$CASE/out"; then fail "$case_name" "message"
else ok "$case_name"; fi

case_name="failover-db is the cluster profile's: without it, the usage and exit 2"
CASE=$TMP/failover-usage
mkdir -p "$CASE"
RC=0
"$STACK" failover-db >"$CASE/out" 2>&1 || RC=$?
if ((RC != 2)); then fail "$case_name" "exit $RC"
elif ! grep -q 'failover-db --profile cluster' "$CASE/out"; then fail "$case_name" "message"
else ok "$case_name"; fi

case_name="cluster nodes: mariadb-1..2 known, mariadb-3 refused with the list"
CASE=$TMP/nodes
mkdir -p "$CASE"
RC=0
# shellcheck disable=SC2016
SECKILL_STATE_DIR=$CASE/state bash -c 'source "$1"; cluster_node_pidfile mariadb-2; cluster_node_pidfile mariadb-3' _ "$STACK" >"$CASE/out" 2>&1 || RC=$?
if ((RC == 0)); then fail "$case_name" "exit 0"
elif ! grep -q "^$CASE/state/cluster/mariadb-2/mysqld.pid$" "$CASE/out"; then fail "$case_name" "mariadb-2's PID file"
elif ! grep -q "unknown cluster node 'mariadb-3' (kafka-1..3, redis-1..6, mariadb-1..2)" "$CASE/out"; then fail "$case_name" "message"
else ok "$case_name"; fi

case_name="a descriptor the caller holds (a flock) is closed before any server starts"
CASE=$TMP/fds
mkdir -p "$CASE"
RC=0
# shellcheck disable=SC2016
bash -c 'exec 7>"$2/lock"; source "$1"; close_inherited_fds; [[ ! -e /proc/$$/fd/7 ]]' _ "$STACK" "$CASE" >"$CASE/out" 2>&1 || RC=$?
if ((RC != 0)); then fail "$case_name" "fd 7 still open (exit $RC)"
else ok "$case_name"; fi

# Prometheus scrapes the gateway's /metrics with a scrape-role credential, never the admin
# token (issue 39): both profiles' configurations, from a dev-secrets file an older checkout
# wrote (admin token and JWT secret only), which keeps its values and gains the scrape token;
# and the tokens file `make run` gives the gateway holds that token with role scrape.
case_name="make monitor: the gateway is scraped with the scrape token, never the admin token"
CASE=$TMP/scrape
mkdir -p "$CASE/state/prometheus" "$CASE/state/cluster/prometheus"
printf 'SECKILL_ADMIN_TOKEN=stack-test-admin-token-0123\nSECKILL_JWT_SECRET=stack-test-jwt-secret-0123456789-0123456789\n' >"$CASE/state/dev-secrets"
RC=0
# shellcheck disable=SC2016
SECKILL_STATE_DIR=$CASE/state bash -c 'source "$1"
	unset SECKILL_ADMIN_TOKEN SECKILL_SCRAPE_TOKEN
	prometheus_files "$STATE/prometheus" prometheus_config
	prometheus_files "$STATE/cluster/prometheus" cluster_prometheus_config
	dev_admin_tokens "$STATE/admin-tokens" "$(dev_secret "$STATE/dev-secrets" SECKILL_SCRAPE_TOKEN)"' _ "$STACK" >"$CASE/out" 2>&1 || RC=$?
scrape=$(sed -n 's/^SECKILL_SCRAPE_TOKEN=//p' "$CASE/state/dev-secrets" 2>/dev/null)
# credentials_of CONFIG: the credentials file of CONFIG's seckill-gateway job.
credentials_of() { awk '/job_name:/ { gw = /seckill-gateway/ } gw && /credentials_file:/ { print $2 }' "$1"; }
single=$(credentials_of "$CASE/state/prometheus/prometheus.yml" 2>/dev/null || true)
cluster=$(credentials_of "$CASE/state/cluster/prometheus/prometheus.yml" 2>/dev/null || true)
if ((RC != 0)); then fail "$case_name" "exit $RC"
elif ! grep -qx 'SECKILL_ADMIN_TOKEN=stack-test-admin-token-0123' "$CASE/state/dev-secrets" ||
	[[ $(wc -l <"$CASE/state/dev-secrets") != 3 || ! $scrape =~ ^[A-Za-z0-9]{24,}$ ]]; then
	fail "$case_name" "dev-secrets: the admin token not kept, or no scrape token added"
elif [[ -z $single || -z $cluster || $(<"$single") != "$scrape" || $(<"$cluster") != "$scrape" ]]; then
	fail "$case_name" "the gateway job's credentials_file ('$single', '$cluster') does not hold the scrape token"
elif grep -rlq stack-test-admin-token "$CASE/state/prometheus" "$CASE/state/cluster/prometheus"; then
	fail "$case_name" "the admin token is in Prometheus's folder: $(grep -rl stack-test-admin-token "$CASE/state/prometheus" "$CASE/state/cluster/prometheus")"
elif ! grep -qx "prometheus sha256:$(printf %s "$scrape" | sha256sum | cut -d' ' -f1) scrape" "$CASE/state/admin-tokens"; then
	fail "$case_name" "admin-tokens has no line 'prometheus sha256:<scrape token's> scrape'"
elif [[ $(stat -c %a "$CASE/state/admin-tokens" "$CASE/state/dev-secrets" "$single" | sort -u) != 600 ]]; then
	fail "$case_name" "a secrets file is not mode 600"
else ok "$case_name"; fi

# ---------------------------------------------------------------- tracing
# Jaeger (SECKILL_TRACING=1): built once per version into the cache, named in the env file
# only while it runs, and never as OTEL_EXPORTER_OTLP_ENDPOINT (every process the tests start
# would trace); its configuration binds loopback only.

case_name="jaeger_binary: built from deploy/jaeger once, into the cache under deploy/jaeger/go.mod's version"
CASE=$TMP/jaeger-build
mkdir -p "$CASE/bin"
# A fake go that records its calls and writes the -o file.
cat >"$CASE/bin/go" <<-'EOF'
	#!/bin/sh
	echo "go $* (in $PWD)" >>"$CASE/go.log"
	while [ $# -gt 0 ]; do
		if [ "$1" = -o ]; then printf '#!/bin/sh\n' >"$2" && chmod +x "$2"; fi
		shift
	done
	EOF
chmod +x "$CASE/bin/go"
: >"$CASE/go.log"
RC=0
(
	export CASE
	PATH=$CASE/bin:$MACHINE_PATH
	# shellcheck source=stack
	source "$STACK"
	CACHE=$CASE/cache
	jaeger_binary
	jaeger_binary
) >"$CASE/out" 2>&1 || RC=$?
version=$(awk '$1 == "github.com/jaegertracing/jaeger" { print $2 }' "$HERE/../jaeger/go.mod")
if ((RC != 0)); then fail "$case_name" "exit $RC"
elif [[ $version != v1.75.0 ]]; then fail "$case_name" "deploy/jaeger/go.mod requires jaeger '$version', want v1.75.0 (the compose image and the docs name its release)"
elif [[ $(grep -c "^$CASE/cache/jaeger-$version/jaeger$" "$CASE/out") != 2 || ! -x $CASE/cache/jaeger-$version/jaeger ]]; then fail "$case_name" "not $CASE/cache/jaeger-$version/jaeger, twice"
elif [[ $(wc -l <"$CASE/go.log") != 1 ]] || ! grep -q "^go build -o $CASE/cache/jaeger-$version/jaeger.tmp github.com/jaegertracing/jaeger/cmd/jaeger (in $(cd "$HERE/../jaeger" && pwd))$" "$CASE/go.log"; then
	fail "$case_name" "go calls: $(<"$CASE/go.log")"
else ok "$case_name"; fi

case_name="the env file names the stack's Jaeger only while it runs, never as OTEL_EXPORTER_OTLP_ENDPOINT"
CASE=$TMP/jaeger-env
mkdir -p "$CASE/state/jaeger"
sleep 60 &
listeners+=($!)
RC=0
# shellcheck disable=SC2016
SECKILL_STATE_DIR=$CASE/state SECKILL_JAEGER_OTLP_PORT=24318 SECKILL_JAEGER_QUERY_PORT=26686 \
	bash -c 'source "$1"; print_env >"$2/without"; echo "$3" >"$STATE/jaeger/jaeger.pid"; print_env >"$2/with"' \
	_ "$STACK" "$CASE" "${listeners[-1]}" >"$CASE/out" 2>&1 || RC=$?
if ((RC != 0)); then fail "$case_name" "exit $RC"
elif grep -q JAEGER "$CASE/without"; then fail "$case_name" "named without a running Jaeger: $(<"$CASE/without")"
elif ! grep -qx 'export SECKILL_JAEGER_OTLP_ENDPOINT=http://127.0.0.1:24318' "$CASE/with" ||
	! grep -qx 'export SECKILL_JAEGER_QUERY_URL=http://127.0.0.1:26686' "$CASE/with"; then fail "$case_name" "with Jaeger running: $(<"$CASE/with")"
elif grep -q OTEL_ "$CASE/with"; then fail "$case_name" "an OTEL_ variable: $(<"$CASE/with")"
else ok "$case_name"; fi

case_name="deploy/jaeger/config.yaml: every listener on SECKILL_JAEGER_HOST, 127.0.0.1 unless set"
CASE=$TMP/jaeger-config
mkdir -p "$CASE"
# Without its comments; the receivers: section alone.
grep -v '^[[:space:]]*#' "$HERE/../jaeger/config.yaml" >"$CASE/config.yaml"
awk '/^receivers:/ { r = 1; next } /^[^[:space:]]/ { r = 0 } r' "$CASE/config.yaml" >"$CASE/receivers"
endpoints=$(grep -E '^[[:space:]]*endpoint:' "$CASE/config.yaml" || true)
# shellcheck disable=SC2016 # the configuration's own ${env:...} references
loopback='endpoint: "${env:SECKILL_JAEGER_HOST:-127.0.0.1}:${env:SECKILL_JAEGER_'
if [[ $(grep -c . <<<"$endpoints") -lt 4 ]]; then fail "$case_name" "fewer than 4 endpoints (OTLP, query HTTP and gRPC, health): $endpoints"
elif grep -v -F "$loopback" <<<"$endpoints"; then fail "$case_name" "an endpoint on another host (above)"
elif grep -q '0\.0\.0\.0' "$CASE/config.yaml"; then fail "$case_name" "0.0.0.0 in the configuration"
elif grep -qE '^[[:space:]]*(grpc|jaeger|zipkin|thrift[a-z_]*):' "$CASE/receivers"; then fail "$case_name" "a gRPC, Jaeger or Zipkin receiver: $(<"$CASE/receivers")"
elif ! grep -qE '^[[:space:]]*level: none$' "$CASE/config.yaml"; then fail "$case_name" "the collector's own metrics are on (a listener on :8888 by default)"
elif ! grep -qE '^[[:space:]]*enable_tracing: false$' "$CASE/config.yaml"; then fail "$case_name" "the query service traces itself (an OTLP/gRPC client of localhost:4317 by default)"
else ok "$case_name"; fi

# ---------------------------------------------------------------- ports
# A server of the script's that cannot bind its port exits, while a server it did not start
# may answer the probe there. These cases run redis_up (every server starts through the same
# helpers) with their own state folder and free ports of their own, fakes of redis-server and
# redis-cli on PATH, and a stand-in for the other server: tiny_redis, a Python listener
# answering +PONG to anything, which ends by itself after 60 s at most.
cat >"$TMP/tiny_redis.py" <<-'EOF'
	import socket, sys, time
	s = socket.socket()
	s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
	s.bind(("127.0.0.1", int(sys.argv[1])))
	s.listen(16)
	print(s.getsockname()[1], flush=True)
	s.settimeout(0.5)
	end = time.time() + 60
	while time.time() < end:
	    try:
	        c, _ = s.accept()
	    except socket.timeout:
	        continue
	    with c:
	        c.settimeout(1)
	        try:
	            c.recv(256)
	            c.sendall(b"+PONG\r\n")
	        except OSError:
	            pass
	EOF
# free_port: a TCP port nothing listens on now (the kernel's pick).
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# listener: starts tiny_redis on a port of the kernel's choice, records its PID (not in a
# subshell, so the trap stops it) and sets $held to the port it holds.
listener() {
	python3 "$TMP/tiny_redis.py" 0 >"$CASE/listener.port" 2>/dev/null &
	listeners+=($!)
	local i
	for ((i = 0; i < 50; i++)); do
		[[ -s $CASE/listener.port ]] && break
		sleep 0.1
	done
	held=$(<"$CASE/listener.port")
}
# port_setup NAME SERVER: a case folder with fake redis-cli (PING on -p PORT, prints the reply)
# and redis-server SERVER: "exits" fails to bind (logs it, lives 2 s, exits 1), "listens"
# becomes tiny_redis on the configured port. A started fake leaves $CASE/started.
port_setup() {
	CASE=$TMP/$1
	mkdir -p "$CASE/bin"
	cat >"$CASE/bin/redis-cli" <<-'EOF'
		#!/usr/bin/env python3
		import socket, sys
		port = int(sys.argv[sys.argv.index("-p") + 1])
		try:
		    with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
		        c.sendall(b"PING\r\n")
		        print(c.recv(256).decode().strip().lstrip("+"))
		except OSError as e:
		    sys.exit(f"Could not connect to Redis at 127.0.0.1:{port}: {e}")
	EOF
	case $2 in
	exits)
		printf '#!/bin/sh
: >"%s/started"
echo "# Warning: Could not create server TCP listening socket 127.0.0.1:port: bind: Address already in use" >>"%s/state/redis/redis.log"
sleep 2
exit 1
' "$CASE" "$CASE" >"$CASE/bin/redis-server"
		;;
	listens)
		# shellcheck disable=SC2016 # $1 and the sed are the fake's, expanded when it runs
		printf '#!/bin/sh
: >"%s/started"
exec python3 "%s" "$(sed -n "s/^port //p" "$1")"
' "$CASE" "$TMP/tiny_redis.py" >"$CASE/bin/redis-server"
		;;
	esac
	chmod +x "$CASE"/bin/*
}
# redis_up_in PORT: redis_up from the sourced script, on PORT, with the case's state folder
# and fakes first on PATH; output in $CASE/out, exit code in $RC. The fake server it may
# start is stopped by the PID file.
redis_up_in() {
	RC=0
	(
		export SECKILL_STATE_DIR=$CASE/state SECKILL_REDIS_PORT=$1 SECKILL_READY_TIMEOUT=10
		PATH=$CASE/bin:$MACHINE_PATH
		# shellcheck source=stack
		source "$STACK"
		redis_up
	) >"$CASE/out" 2>&1 || RC=$?
	if [[ -s $CASE/state/redis/redis.pid ]]; then
		listeners+=("$(<"$CASE/state/redis/redis.pid")")
	fi
}

case_name="a port another server holds: redis_up refuses it, names the port, starts nothing"
port_setup taken exits
listener
redis_up_in "$held"
if ((RC == 0)); then fail "$case_name" "exit 0: the other server on $held was taken for ours"
elif ! grep -q "redis: port $held is already in use by pid [0-9]*: [^ ]*python3 .*tiny_redis.py" "$CASE/out"; then fail "$case_name" "message does not name port $held and its holder"
elif [[ -e $CASE/started ]] || grep -q 'starting redis' "$CASE/out"; then fail "$case_name" "a server was started"
else ok "$case_name"; fi

case_name="readiness: an answer on the port while the started server does not hold it is not ready"
# The probe is answered (as by a server that took the port after the check), while the
# server the script started failed to bind and exits: it must be reported as exited.
port_setup exited exits
printf '#!/bin/sh
echo PONG
' >"$CASE/bin/redis-cli"
redis_up_in "$(free_port)"
if ((RC == 0)); then fail "$case_name" "exit 0: ready without the started server"
elif [[ ! -e $CASE/started ]]; then fail "$case_name" "the fake server was not started"
elif ! grep -q 'redis exited during start-up' "$CASE/out" || ! grep -q 'Address already in use' "$CASE/out"; then fail "$case_name" "message"
else ok "$case_name"; fi

case_name="readiness: the started server holding its port and answering is ready; up again starts nothing"
port_setup ours listens
free=$(free_port)
redis_up_in "$free"
if ((RC != 0)); then fail "$case_name" "exit $RC"
elif [[ ! -e $CASE/started ]] || ! grep -q "starting redis on 127.0.0.1:$free" "$CASE/out"; then fail "$case_name" "not started"
else
	rm "$CASE/started"
	redis_up_in "$free"
	if ((RC != 0)); then fail "$case_name" "second up: exit $RC"
	elif [[ -e $CASE/started ]] || ! grep -q "redis already running on 127.0.0.1:$free" "$CASE/out"; then fail "$case_name" "second up started another"
	else ok "$case_name"; fi
fi
kill "$(<"$CASE/state/redis/redis.pid")" 2>/dev/null || true

case_name="ports_free names the taken one of a server's ports, and the variable that moves it"
CASE=$TMP/ports
mkdir -p "$CASE"
listener
free=$(free_port)
RC=0
# shellcheck disable=SC2016
bash -c 'source "$1"; ports_free kafka "$2:SECKILL_KAFKA_PORT" "$3:SECKILL_KAFKA_CONTROLLER_PORT"' _ "$STACK" "$free" "$held" >"$CASE/out" 2>&1 || RC=$?
if ((RC == 0)); then fail "$case_name" "exit 0"
elif ! grep -q "kafka: port $held is already in use by pid .*SECKILL_KAFKA_CONTROLLER_PORT" "$CASE/out"; then fail "$case_name" "message"
elif grep -q "port $free" "$CASE/out"; then fail "$case_name" "the free port $free named"
else ok "$case_name"; fi

echo "stack: $passed passed, $failed failed"
((failed == 0))
