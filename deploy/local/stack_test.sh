#!/usr/bin/env bash
# deploy/local/stack_test.sh: tests deploy/local/stack's installation step and its error
# reporting without touching the machine: the script is sourced (its guard keeps it from
# running a command), POLICY_RC_D points into a temporary folder, and PATH holds only fake
# apt-get, id and server commands. `make lint` (part of `make test`) runs it.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

# make test exports SECKILL_WITH_CHROMIUM=1 to its prerequisites (lint among them); each case
# sets it itself.
unset SECKILL_WITH_CHROMIUM
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STACK=$HERE/stack
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

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

echo "stack: $passed passed, $failed failed"
((failed == 0))
