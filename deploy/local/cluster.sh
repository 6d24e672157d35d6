# shellcheck shell=bash
# deploy/local/cluster.sh: the cluster profile of deploy/local/stack, which sources it
# (`deploy/local/stack up|down|status|env --profile cluster`). The same real servers as the
# single-node stack, in the shape a shop runs on its biggest sale day, on 127.0.0.1 only:
#
#   kafka-1..3   Apache Kafka 4.4.0, three KRaft nodes (broker+controller each, a three-voter
#                quorum); topics with replication factor 3 and min.insync.replicas 2
#   redis-1..6   Redis Cluster: three primaries and three replicas (redis-cli --cluster create
#                --cluster-replicas 1), AOF everysec and noeviction on each
#   mariadb-1..2 MariaDB 10.11 (Debian), a primary and a replica: GTID replication,
#                semi-synchronous (AFTER_SYNC); database seckill_cluster
#   mariadb-writer  HAProxy on the one address the services use, following the writable
#                server (see the MariaDB section below)
#
# Each node has its own ports, folder and PID file under $STATE/cluster/<node>/. The services
# (two gateways behind HAProxy, three consumers, two reconcilers) are started by
# `PROFILE=cluster deploy/local/run` (make run PROFILE=cluster).
#
# Node helpers for fault scenarios (NODE is kafka-1..3, redis-1..6 or mariadb-1..2):
#   deploy/local/stack kill NODE --profile cluster    SIGKILL, wait until gone
#   deploy/local/stack stop NODE --profile cluster    SIGTERM, wait until gone (30 s, then SIGKILL)
#   deploy/local/stack start NODE --profile cluster   start it again (same data), wait ready
#   deploy/local/stack failover-db --profile cluster
#                     fence the MariaDB primary, promote the replica, move the writer address
# `up` starts every node that is down, so it also restarts a killed one.
#
# Every broker runs the Prometheus JMX exporter (the Java agent io.prometheus.jmx:
# jmx_prometheus_javaagent from Maven Central, with deploy/monitoring/kafka-jmx.yml): node i
# serves its metrics on 127.0.0.1:29290+i. SECKILL_MONITORING=1 (make monitor PROFILE=cluster)
# also starts a Prometheus of the profile's own on 127.0.0.1:19091 and one
# prometheus-redis-exporter (127.0.0.1:19122) that scrapes each Redis node through its
# multi-target /scrape endpoint; Prometheus scrapes the brokers' agents, the Redis nodes and
# the services of `make run PROFILE=cluster`.

CLUSTER_STATE=$STATE/cluster
CLUSTER_KAFKA_NODES=3
# Kafka node i listens on KAFKA_BASE+i (clients) and CONTROLLER_BASE+i (the KRaft quorum);
# Redis node i on REDIS_BASE+i and, for the cluster bus, REDIS_BASE+i+10000.
CLUSTER_KAFKA_BASE=${SECKILL_CLUSTER_KAFKA_BASE:-29090}
CLUSTER_CONTROLLER_BASE=${SECKILL_CLUSTER_CONTROLLER_BASE:-29190}
CLUSTER_REDIS_NODES=6
CLUSTER_REDIS_BASE=${SECKILL_CLUSTER_REDIS_BASE:-17000}
CLUSTER_MYSQL_DB=seckill_cluster
# Node i's JMX exporter (metrics of the broker) on METRICS_BASE+i.
CLUSTER_KAFKA_METRICS_BASE=${SECKILL_CLUSTER_KAFKA_METRICS_BASE:-29290}
JMX_EXPORTER_VERSION=1.0.1
JMX_EXPORTER_JAR=$CACHE/jmx-exporter-$JMX_EXPORTER_VERSION/jmx_prometheus_javaagent-$JMX_EXPORTER_VERSION.jar
# Three JVMs share the machine with everything else: small heaps (the brokers hold little).
CLUSTER_KAFKA_HEAP=${SECKILL_CLUSTER_KAFKA_HEAP:--Xms256m -Xmx512m}

cluster_kafka_port() { echo $((CLUSTER_KAFKA_BASE + $1)); }
cluster_controller_port() { echo $((CLUSTER_CONTROLLER_BASE + $1)); }
cluster_redis_port() { echo $((CLUSTER_REDIS_BASE + $1)); }
cluster_kafka_metrics_port() { echo $((CLUSTER_KAFKA_METRICS_BASE + $1)); }

cluster_kafka_brokers() {
	local i out=()
	for ((i = 1; i <= CLUSTER_KAFKA_NODES; i++)); do out+=("127.0.0.1:$(cluster_kafka_port "$i")"); done
	(
		IFS=,
		echo "${out[*]}"
	)
}

cluster_redis_addrs() {
	local i out=()
	for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do out+=("127.0.0.1:$(cluster_redis_port "$i")"); done
	(
		IFS=,
		echo "${out[*]}"
	)
}

# ---------------------------------------------------------------- Redis Cluster

cluster_redis_cli() { # node args...
	local i=$1
	shift
	redis-cli -h 127.0.0.1 -p "$(cluster_redis_port "$i")" "$@"
}

cluster_redis_probe() { [[ $(cluster_redis_cli "$1" ping 2>/dev/null) == PONG ]]; }

# cluster_redis_start I: starts redis-I unless it runs and answers; waits until it answers.
cluster_redis_start() {
	local i=$1 port dir
	port=$(cluster_redis_port "$i")
	dir=$CLUSTER_STATE/redis-$i
	mkdir -p "$dir"
	if serves "$dir/redis.pid" "$port" cluster_redis_probe "$i"; then
		log "redis-$i already running on 127.0.0.1:$port"
		return
	fi
	ports_free "redis-$i" "$port:SECKILL_CLUSTER_REDIS_BASE" "$((port + 10000)):SECKILL_CLUSTER_REDIS_BASE"
	# The single-node stack's settings (the gate depends on them: stock is never evicted,
	# the AOF bounds a crash's loss to about a second) plus cluster mode. Everything else,
	# cluster-node-timeout (15 s) included, is Redis's default.
	cat >"$dir/redis.conf" <<-EOF
		bind 127.0.0.1
		port $port
		protected-mode yes
		daemonize no
		dir $dir
		logfile $dir/redis.log
		appendonly yes
		appendfsync everysec
		appendfilename "appendonly.aof"
		maxmemory 1gb
		maxmemory-policy noeviction
		cluster-enabled yes
		cluster-config-file nodes.conf
	EOF
	log "starting redis-$i on 127.0.0.1:$port (cluster bus $((port + 10000)))"
	setsid "$(command -v redis-server)" "$dir/redis.conf" >>"$dir/redis.out" 2>&1 </dev/null &
	echo $! >"$dir/redis.pid"
	wait_ready "redis-$i" "$dir/redis.pid" "$dir/redis.log" "$port" cluster_redis_probe "$i"
}

cluster_redis_info() { # node field
	cluster_redis_cli "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"
}

# The cluster is whole when every node says cluster_state:ok and knows all six nodes.
cluster_redis_ok() {
	local i
	for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do
		[[ $(cluster_redis_info "$i" cluster_state) == ok ]] || return 1
		[[ $(cluster_redis_info "$i" cluster_known_nodes) == "$CLUSTER_REDIS_NODES" ]] || return 1
	done
}

cluster_redis_up() {
	local i
	for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do cluster_redis_start "$i"; done
	if [[ $(cluster_redis_info 1 cluster_slots_assigned) == 0 && $(cluster_redis_info 1 cluster_known_nodes) == 1 ]]; then
		# Fresh nodes (no slot assigned, knowing only themselves): create the cluster once.
		local nodes=()
		for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do nodes+=("127.0.0.1:$(cluster_redis_port "$i")"); done
		log "creating the redis cluster: 3 primaries, 3 replicas"
		redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes \
			>"$CLUSTER_STATE/redis-create.log" 2>&1 ||
			{ tail -n 40 "$CLUSTER_STATE/redis-create.log" >&2; die "redis-cli --cluster create failed"; }
	fi
	# Nodes that restarted rejoin from their nodes.conf; a killed primary comes back as a
	# replica of the one promoted in its place. Wait until the cluster agrees it is whole.
	local deadline=$((SECONDS + READY_TIMEOUT))
	until cluster_redis_ok; do
		if ((SECONDS > deadline)); then
			cluster_redis_cli 1 cluster nodes >&2 || true
			die "the redis cluster is not ok after ${READY_TIMEOUT}s (a half-created cluster: 'stack down --profile cluster', remove $CLUSTER_STATE/redis-*, 'stack up --profile cluster')"
		fi
		sleep 0.2
	done
}

# ---------------------------------------------------------------- Kafka (KRaft, 3 nodes)

cluster_kafka_probe() { "$STATE/bin/kafkainit" -brokers "127.0.0.1:$(cluster_kafka_port "$1")" -probe -timeout 2s; }

cluster_kafka_java_opts() { # node
	local dir=$CLUSTER_STATE/kafka-$1 heap
	read -r -a heap <<<"$CLUSTER_KAFKA_HEAP"
	printf '%s\n' "${heap[@]}"
	kafka_jvm_opts "$dir"
	printf '%s\n' "-Dlog4j2.configurationFile=$dir/log4j2.properties" -cp "$KAFKA_LIBS/*"
}

# cluster_kafka_configure I: writes node I's configuration and formats its storage once.
cluster_kafka_configure() {
	local i=$1
	local dir=$CLUSTER_STATE/kafka-$i voters=() j
	mkdir -p "$dir"
	for ((j = 1; j <= CLUSTER_KAFKA_NODES; j++)); do voters+=("$j@127.0.0.1:$(cluster_controller_port "$j")"); done
	# Replication settings a replicated production cluster runs with (README, "The cluster
	# profile"): a topic's partitions on all three brokers, a write acknowledged (acks=all)
	# once two hold it, no out-of-sync replica ever elected leader, and Kafka's own topics
	# (group offsets, transactions, share groups) replicated the same way. Everything else
	# is the broker's default, group.initial.rebalance.delay.ms (3 s) included.
	cat >"$dir/server.properties" <<-EOF
		process.roles=broker,controller
		node.id=$i
		controller.quorum.voters=$(
			IFS=,
			echo "${voters[*]}"
		)
		listeners=PLAINTEXT://127.0.0.1:$(cluster_kafka_port "$i"),CONTROLLER://127.0.0.1:$(cluster_controller_port "$i")
		advertised.listeners=PLAINTEXT://127.0.0.1:$(cluster_kafka_port "$i")
		controller.listener.names=CONTROLLER
		inter.broker.listener.name=PLAINTEXT
		listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
		log.dirs=$dir/data
		default.replication.factor=3
		min.insync.replicas=2
		unclean.leader.election.enable=false
		offsets.topic.replication.factor=3
		transaction.state.log.replication.factor=3
		transaction.state.log.min.isr=2
		share.coordinator.state.topic.replication.factor=3
		share.coordinator.state.topic.min.isr=2
	EOF
	kafka_log4j2 "$dir"
	if [[ ! -f $dir/data/meta.properties ]]; then
		local opts
		mapfile -t opts < <(cluster_kafka_java_opts "$i")
		log "formatting kafka-$i storage (cluster $(<"$CLUSTER_STATE/kafka-cluster-id"))"
		java "${opts[@]}" kafka.tools.StorageTool format -t "$(<"$CLUSTER_STATE/kafka-cluster-id")" \
			-c "$dir/server.properties" >"$dir/format.log" 2>&1 ||
			{ tail -n 40 "$dir/format.log" >&2; die "kafka-$i storage format failed"; }
	fi
}

# fetch_jmx_exporter: the JMX exporter's Java agent (one jar) from Maven Central into the cache.
fetch_jmx_exporter() {
	[[ -f $JMX_EXPORTER_JAR ]] && return
	log "fetching the Prometheus JMX exporter $JMX_EXPORTER_VERSION (Java agent) from Maven Central"
	mkdir -p "$CACHE"
	local tmp
	tmp=$(mktemp -d "$CACHE/.jmx-fetch.XXXXXX")
	(cd "$tmp" && mvn -B -q dependency:copy -Dartifact="io.prometheus.jmx:jmx_prometheus_javaagent:$JMX_EXPORTER_VERSION" \
		-DoutputDirectory="$tmp/out" >"$tmp/mvn.log" 2>&1) ||
		{ tail -n 40 "$tmp/mvn.log" >&2; die "maven could not fetch the JMX exporter"; }
	mkdir -p "$(dirname "$JMX_EXPORTER_JAR")"
	# Moved last so an interrupted fetch never leaves a half-written jar behind.
	mv "$tmp/out/jmx_prometheus_javaagent-$JMX_EXPORTER_VERSION.jar" "$JMX_EXPORTER_JAR"
	rm -rf "$tmp"
}

# cluster_kafka_launch I: starts node I unless it runs and answers (no waiting: a node
# answers only once a quorum of controllers is up, so all three are launched first).
cluster_kafka_launch() {
	local i=$1
	local dir=$CLUSTER_STATE/kafka-$i
	if serves "$dir/kafka.pid" "$(cluster_kafka_port "$i")" cluster_kafka_probe "$i"; then
		log "kafka-$i already running on 127.0.0.1:$(cluster_kafka_port "$i")"
		return
	fi
	if pid_alive "$dir/kafka.pid"; then
		return # started, not answering yet: cluster_kafka_wait waits for it
	fi
	ports_free "kafka-$i" "$(cluster_kafka_port "$i"):SECKILL_CLUSTER_KAFKA_BASE" \
		"$(cluster_controller_port "$i"):SECKILL_CLUSTER_CONTROLLER_BASE" \
		"$(cluster_kafka_metrics_port "$i"):SECKILL_CLUSTER_KAFKA_METRICS_BASE"
	cluster_kafka_configure "$i"
	fetch_jmx_exporter
	local opts
	mapfile -t opts < <(cluster_kafka_java_opts "$i")
	# The JMX exporter's agent, with a copy of its configuration that the node keeps (the
	# agent reloads the file when it changes; a checkout moving under a running broker must
	# not change what it exports).
	cp "$ROOT/deploy/monitoring/kafka-jmx.yml" "$dir/kafka-jmx.yml"
	opts+=("-javaagent:$JMX_EXPORTER_JAR=127.0.0.1:$(cluster_kafka_metrics_port "$i"):$dir/kafka-jmx.yml")
	log "starting kafka-$i on 127.0.0.1:$(cluster_kafka_port "$i") (controller $(cluster_controller_port "$i"), metrics $(cluster_kafka_metrics_port "$i"))"
	setsid java "${opts[@]}" kafka.Kafka "$dir/server.properties" >>"$dir/kafka.out" 2>&1 </dev/null &
	echo $! >"$dir/kafka.pid"
}

# cluster_kafka_quorum: the KRaft quorum's status (LeaderId is the active controller).
cluster_kafka_quorum() {
	java -cp "$KAFKA_LIBS/*" org.apache.kafka.tools.MetadataQuorumCommand \
		--bootstrap-server "$(cluster_kafka_brokers)" describe --status 2>/dev/null
}

cluster_kafka_wait() {
	local i=$1 dir=$CLUSTER_STATE/kafka-$1
	wait_ready "kafka-$i" "$dir/kafka.pid" "$dir/server.log" "$(cluster_kafka_port "$i")" cluster_kafka_probe "$i"
	grep -q "Kafka version: $KAFKA_VERSION" "$dir/server.log" ||
		die "kafka-$i does not log Kafka version $KAFKA_VERSION"
}

cluster_kafka_build_init() {
	mkdir -p "$STATE/bin"
	(cd "$ROOT" && go build -o "$STATE/bin/kafkainit" ./deploy/local/kafkainit) ||
		die "could not build deploy/local/kafkainit"
}

cluster_kafka_up() {
	local i
	cluster_kafka_build_init
	fetch_kafka
	mkdir -p "$CLUSTER_STATE"
	if [[ ! -s $CLUSTER_STATE/kafka-cluster-id ]]; then
		# One cluster id for the three nodes, in Kafka's base64url-UUID form.
		kafka_cluster_id >"$CLUSTER_STATE/kafka-cluster-id"
	fi
	for ((i = 1; i <= CLUSTER_KAFKA_NODES; i++)); do cluster_kafka_launch "$i"; done
	for ((i = 1; i <= CLUSTER_KAFKA_NODES; i++)); do cluster_kafka_wait "$i"; done
	# All three brokers registered, then the topics: replication factor 3, min ISR 2.
	"$STATE/bin/kafkainit" -brokers "$(cluster_kafka_brokers)" -min-brokers "$CLUSTER_KAFKA_NODES" \
		-replication-factor 3 -min-insync-replicas 2 -timeout 90s >"$CLUSTER_STATE/topics.log" 2>&1 ||
		{ cat "$CLUSTER_STATE/topics.log" >&2; die "kafka topics could not be created on the cluster"; }
}

# ---------------------------------------------------------------- MariaDB (a replicated pair)
#
# mariadb-1 and mariadb-2 are Debian's mariadbd, one primary and one replica: GTID replication
# (log_slave_updates on both, so either can be promoted with every transaction in its binary
# log) and semi-synchronous replication built into MariaDB 10.11, with the primary waiting
# AFTER_SYNC: a commit is written and synced to the primary's binary log, then the primary
# waits until the replica has the transaction in its relay log, and only then commits it in
# the engine and answers the client. So every commit a service was told about is on the
# replica too, and a failover that lets the replica apply its relay log loses none of them.
#
# The wait is bounded by rpl_semi_sync_master_timeout (CLUSTER_MYSQL_SEMISYNC_TIMEOUT_MS):
# a replica that does not acknowledge in time makes the primary fall back to asynchronous
# replication (Rpl_semi_sync_master_status OFF) until the replica catches up again. While
# it is off a commit may exist on the primary only; docs/operators.md (Scale-out guide) says
# what that means for a 202 and which gauge and alert show it. Every other setting is the
# server's default, but sync_binlog=1 (the binary log is what AFTER_SYNC waits on).
#
# mariadb-writer is HAProxy on one address (the services' SECKILL_MYSQL_DSN): its health
# check (an external check running SELECT @@read_only) passes only on the writable server,
# and sessions to a server that fails it are cut, so the address follows a failover.
# mariadb-reader, a second listener of the same HAProxy, is its mirror: it reaches only a
# read-only server, so SECKILL_MYSQL_REPLICA_DSN (the reconcilers' replication gauges) names
# the replica whichever server is the replica after a failover, and nothing while none is up.
# Each server starts read-only; the stack makes writable only the one recorded as the
# primary in $CLUSTER_STATE/mariadb-primary (a restarted old primary never takes writes).

CLUSTER_MYSQL_NODES=2
# The writer address is CLUSTER_MYSQL_BASE, node i listens on CLUSTER_MYSQL_BASE+i.
CLUSTER_MYSQL_BASE=${SECKILL_CLUSTER_MYSQL_BASE:-27306}
# The reader address (SECKILL_MYSQL_REPLICA_DSN), below the writer so no node port meets it.
CLUSTER_MYSQL_READER_PORT=${SECKILL_CLUSTER_MYSQL_READER_PORT:-27305}
CLUSTER_MYSQL_SEMISYNC_TIMEOUT_MS=${SECKILL_CLUSTER_MYSQL_SEMISYNC_TIMEOUT_MS:-2000}
CLUSTER_MYSQL_REPL_USER=seckill_repl
CLUSTER_MYSQL_REPL_PASSWORD=seckill_repl
# The health check's user: no privilege but to log in and read @@read_only.
CLUSTER_MYSQL_CHECK_USER=seckill_check
CLUSTER_MYSQL_CHECK_PASSWORD=seckill_check
# How long a promotion waits for the replica to apply what it received.
CLUSTER_MYSQL_APPLY_TIMEOUT=${SECKILL_CLUSTER_MYSQL_APPLY_TIMEOUT:-60}

cluster_mysql_port() { echo $((CLUSTER_MYSQL_BASE + $1)); }
cluster_mysql_dir() { echo "$CLUSTER_STATE/mariadb-$1"; }
cluster_mysql() { # node args...: root over the node's own socket
	local i=$1
	shift
	mariadb --no-defaults -uroot -S "$(cluster_mysql_dir "$i")/mysqld.sock" "$@"
}
cluster_mysql_probe() { cluster_mysql "$1" -N -e 'SELECT 1' >/dev/null 2>&1; }
cluster_mysql_other() { echo $((3 - $1)); }
cluster_mysql_nodes() { # the pair's own addresses (chaos rows reach each node directly)
	local i out=()
	for ((i = 1; i <= CLUSTER_MYSQL_NODES; i++)); do out+=("127.0.0.1:$(cluster_mysql_port "$i")"); done
	(
		IFS=,
		echo "${out[*]}"
	)
}

# cluster_mysql_primary: the node recorded as the primary (1 until a failover moves it).
cluster_mysql_primary() {
	local f=$CLUSTER_STATE/mariadb-primary
	if [[ -s $f ]]; then cat "$f"; else echo 1; fi
}

# cluster_mysql_slave_field NODE FIELD: one field of SHOW SLAVE STATUS (empty: not a replica).
cluster_mysql_slave_field() {
	{ cluster_mysql "$1" -e 'SHOW SLAVE STATUS\G' 2>/dev/null || true; } | sed -n "s/^ *$2: //p"
}

# cluster_mysql_start I: starts mariadb-I read-only unless it runs and answers; waits ready.
cluster_mysql_start() {
	local i=$1 dir port
	dir=$(cluster_mysql_dir "$i")
	port=$(cluster_mysql_port "$i")
	mkdir -p "$dir"
	if serves "$dir/mysqld.pid" "$port" cluster_mysql_probe "$i"; then
		log "mariadb-$i already running on 127.0.0.1:$port"
		return
	fi
	ports_free "mariadb-$i" "$port:SECKILL_CLUSTER_MYSQL_BASE"
	if [[ ! -d $dir/data/mysql ]]; then
		# A new datadir gets a server_id never used before in the pair: a replica skips events
		# carrying its own server_id, so a node copied afresh from the primary's binary log
		# under its old id would skip everything it once wrote as a primary.
		local id=$i
		if [[ -s $dir/server-id ]]; then id=$(($(<"$dir/server-id") + CLUSTER_MYSQL_NODES)); fi
		echo "$id" >"$dir/server-id"
	fi
	[[ -s $dir/server-id ]] || echo "$i" >"$dir/server-id"
	mariadb_datadir "$dir" "mariadb-$i"
	# A server that is not the recorded primary starts with init_rpl_role=SLAVE: if it crashed
	# as a primary (killed, then failed over), its recovery rolls back and truncates from its
	# binary log the transactions no replica acknowledged (semi-sync AFTER_SYNC: they were
	# never answered), so it can rejoin as a replica of the server promoted meanwhile. Without
	# it a killed primary kept such a transaction and could not rejoin ("GTID ... not in the
	# master's binlog"; MariaDB 10.11.9 moved this truncation from rpl_semi_sync_slave_enabled
	# to init_rpl_role). The recorded primary restarting keeps everything: its replica may
	# already have applied those transactions. The primary side of semi-sync is switched on
	# with the role (cluster_mysql_roles, failover): on a replica it would make the replication
	# thread wait for acknowledgements from replicas of its own, which it does not have.
	local role=() note=""
	if [[ $i != "$(cluster_mysql_primary)" ]]; then
		role=(--init-rpl-role=SLAVE)
		note="; init_rpl_role=SLAVE"
	fi
	log "starting mariadb-$i on 127.0.0.1:$port (read-only until the stack gives it a role$note)"
	setsid "$(command -v mariadbd)" --no-defaults --datadir="$dir/data" --user="$(id -un)" \
		--bind-address=127.0.0.1 --port="$port" --socket="$dir/mysqld.sock" \
		--pid-file="$dir/mariadbd.pid" --log-error="$dir/mariadb.log" \
		--server-id="$(<"$dir/server-id")" --log-bin="$dir/data/binlog" --relay-log="$dir/data/relay" \
		--log-slave-updates=ON --sync-binlog=1 --read-only=ON \
		--rpl-semi-sync-slave-enabled=ON \
		--rpl-semi-sync-master-wait-point=AFTER_SYNC \
		--rpl-semi-sync-master-timeout="$CLUSTER_MYSQL_SEMISYNC_TIMEOUT_MS" "${role[@]}" \
		>>"$dir/mariadb.out" 2>&1 </dev/null &
	echo $! >"$dir/mysqld.pid"
	wait_ready "mariadb-$i" "$dir/mysqld.pid" "$dir/mariadb.log" "$port" cluster_mysql_probe "$i"
}

# cluster_mysql_bootstrap P: on the primary, the users and the cluster's database (each
# statement idempotent; replicated to the other node like any write).
cluster_mysql_bootstrap() {
	local p=$1
	cluster_mysql "$p" <<-EOF
		CREATE DATABASE IF NOT EXISTS \`$CLUSTER_MYSQL_DB\`;
		CREATE USER IF NOT EXISTS '$MYSQL_USER'@'127.0.0.1' IDENTIFIED BY '$MYSQL_PASSWORD';
		CREATE USER IF NOT EXISTS '$MYSQL_USER'@'localhost' IDENTIFIED BY '$MYSQL_PASSWORD';
		GRANT ALL PRIVILEGES ON \`seckill%\`.* TO '$MYSQL_USER'@'127.0.0.1';
		GRANT ALL PRIVILEGES ON \`seckill%\`.* TO '$MYSQL_USER'@'localhost';
		GRANT SLAVE MONITOR ON *.* TO '$MYSQL_USER'@'127.0.0.1';
		GRANT SLAVE MONITOR ON *.* TO '$MYSQL_USER'@'localhost';
		CREATE USER IF NOT EXISTS '$CLUSTER_MYSQL_REPL_USER'@'127.0.0.1' IDENTIFIED BY '$CLUSTER_MYSQL_REPL_PASSWORD';
		GRANT REPLICATION SLAVE ON *.* TO '$CLUSTER_MYSQL_REPL_USER'@'127.0.0.1';
		CREATE USER IF NOT EXISTS '$CLUSTER_MYSQL_CHECK_USER'@'127.0.0.1' IDENTIFIED BY '$CLUSTER_MYSQL_CHECK_PASSWORD';
	EOF
}

# cluster_mysql_follow R P: makes mariadb-R a replica of mariadb-P unless it already
# replicates from it. Its GTID position is its own binary log's (log_slave_updates: every
# transaction it applied or, as a former primary, wrote), so it asks P for what comes after.
cluster_mysql_follow() {
	local r=$1 p=$2 port
	port=$(cluster_mysql_port "$p")
	if [[ $(cluster_mysql_slave_field "$r" Master_Port) == "$port" && $(cluster_mysql_slave_field "$r" Slave_IO_Running) != No ]]; then
		return
	fi
	log "mariadb-$r joins as a replica of mariadb-$p (GTID, slave_pos)"
	cluster_mysql "$r" <<-EOF
		SET GLOBAL read_only = 1;
		SET GLOBAL rpl_semi_sync_master_enabled = 0;
		STOP SLAVE;
		SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos;
		CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = $port,
			MASTER_USER = '$CLUSTER_MYSQL_REPL_USER', MASTER_PASSWORD = '$CLUSTER_MYSQL_REPL_PASSWORD',
			MASTER_CONNECT_RETRY = 1, MASTER_USE_GTID = slave_pos;
		START SLAVE;
	EOF
	local deadline=$((SECONDS + READY_TIMEOUT))
	until [[ $(cluster_mysql_slave_field "$r" Slave_IO_Running) == Yes && $(cluster_mysql_slave_field "$r" Slave_SQL_Running) == Yes ]]; do
		if ((SECONDS > deadline)); then
			cluster_mysql "$r" -e 'SHOW SLAVE STATUS\G' | grep -E 'Running|Error' >&2 || true
			die "mariadb-$r does not replicate from mariadb-$p (a diverged former primary: 'stack stop mariadb-$r --profile cluster', remove $(cluster_mysql_dir "$r")/data, 'stack start mariadb-$r --profile cluster' copies it afresh from mariadb-$p's binary log)"
		fi
		sleep 0.2
	done
}

# cluster_mysql_roles: the recorded primary writable (if it answers), the other its replica.
cluster_mysql_roles() {
	local p r
	p=$(cluster_mysql_primary)
	r=$(cluster_mysql_other "$p")
	if cluster_mysql_probe "$p"; then
		[[ -n $(cluster_mysql_slave_field "$p" Master_Port) ]] &&
			die "mariadb-$p is recorded as the primary but is configured as a replica"
		cluster_mysql_bootstrap "$p"
		cluster_mysql "$p" -e 'SET GLOBAL rpl_semi_sync_master_enabled = 1; SET GLOBAL read_only = 0'
	fi
	if cluster_mysql_probe "$r"; then
		cluster_mysql_probe "$p" || die "mariadb-$p (the primary) must answer before mariadb-$r can replicate from it"
		cluster_mysql_follow "$r" "$p"
	fi
}

# The writer address: HAProxy (Debian's package) in TCP mode.
cluster_writer_dir() { echo "$CLUSTER_STATE/mariadb-writer"; }
cluster_writer_probe() { # the address reaches a writable server
	[[ $(mariadb --no-defaults -h 127.0.0.1 -P "$CLUSTER_MYSQL_BASE" -u"$CLUSTER_MYSQL_CHECK_USER" \
		-p"$CLUSTER_MYSQL_CHECK_PASSWORD" --connect-timeout=2 -N -e 'SELECT @@read_only' 2>/dev/null) == 0 ]]
}
# cluster_writer_node [port]: the node the writer address (or the address on port) reaches
# now, by the server's port.
cluster_writer_node() {
	local port
	port=$(mariadb --no-defaults -h 127.0.0.1 -P "${1:-$CLUSTER_MYSQL_BASE}" -u"$CLUSTER_MYSQL_CHECK_USER" \
		-p"$CLUSTER_MYSQL_CHECK_PASSWORD" --connect-timeout=2 -N -e 'SELECT @@port' 2>/dev/null) || return 0
	[[ -n $port ]] && echo $((port - CLUSTER_MYSQL_BASE))
}

cluster_writer_up() {
	local dir
	dir=$(cluster_writer_dir)
	mkdir -p "$dir"
	if pid_alive "$dir/haproxy.pid"; then
		log "mariadb-writer already running on 127.0.0.1:$CLUSTER_MYSQL_BASE"
	else
		# HAProxy runs the check with the server's address and port as its arguments 3 and 4;
		# it passes only when the server answers read_only = 0.
		# mariadb-reader's check is the same query passing on read_only = 1.
		local check want
		for check in writable:0 readonly:1; do
			want=${check#*:}
			check=${check%%:*}
			cat >"$dir/$check" <<-EOF
				#!/bin/sh
				# Written by deploy/local/stack (cluster.sh); HAProxy's check of mariadb-writer/reader.
				ro=\$($(command -v mariadb) --no-defaults -h "\$3" -P "\$4" -u$CLUSTER_MYSQL_CHECK_USER \\
					-p$CLUSTER_MYSQL_CHECK_PASSWORD --connect-timeout=1 -N -e 'SELECT @@read_only' 2>/dev/null)
				[ "\$ro" = $want ]
			EOF
			chmod 700 "$dir/$check"
		done
		# A check every 500 ms, down after two failures, up after one success: the address
		# leaves a fenced primary within about a second and reaches a promoted one within
		# half a second. on-marked-down cuts the sessions still open to a server that failed
		# (the services' pooled connections reconnect, through the address, to the writer).
		# balance first: should two servers ever both pass, every session goes to one.
		local servers="" i
		for ((i = 1; i <= CLUSTER_MYSQL_NODES; i++)); do
			servers+="    server mariadb-$i 127.0.0.1:$(cluster_mysql_port "$i") check"$'\n'
		done
		cat >"$dir/haproxy.cfg" <<-EOF
			# Written by deploy/local/stack (cluster.sh); edit the script, not this file.
			global
			    external-check
			    insecure-fork-wanted
			    stats socket $dir/haproxy.sock mode 600 level admin
			defaults
			    mode tcp
			    timeout connect 2s
			    timeout client 30m
			    timeout server 30m
			    timeout check 2s
			listen mariadb-writer
			    bind 127.0.0.1:$CLUSTER_MYSQL_BASE
			    balance first
			    option external-check
			    external-check path "/usr/bin:/bin"
			    external-check command $dir/writable
			    default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
			$servers
			listen mariadb-reader
			    bind 127.0.0.1:$CLUSTER_MYSQL_READER_PORT
			    balance first
			    option external-check
			    external-check path "/usr/bin:/bin"
			    external-check command $dir/readonly
			    default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
			$servers
		EOF
		ports_free mariadb-writer "$CLUSTER_MYSQL_BASE:SECKILL_CLUSTER_MYSQL_BASE" "$CLUSTER_MYSQL_READER_PORT:SECKILL_CLUSTER_MYSQL_READER_PORT"
		log "starting mariadb-writer (haproxy) on 127.0.0.1:$CLUSTER_MYSQL_BASE, mariadb-reader on 127.0.0.1:$CLUSTER_MYSQL_READER_PORT"
		setsid "$(command -v haproxy)" -db -f "$dir/haproxy.cfg" >>"$dir/haproxy.log" 2>&1 </dev/null &
		echo $! >"$dir/haproxy.pid"
	fi
	cluster_mysql_probe "$(cluster_mysql_primary)" || return 0 # no writer to wait for
	wait_ready mariadb-writer "$dir/haproxy.pid" "$dir/haproxy.log" "$CLUSTER_MYSQL_BASE" cluster_writer_probe
}

cluster_mariadb_up() {
	local i fresh=1
	for ((i = 1; i <= CLUSTER_MYSQL_NODES; i++)); do
		[[ -d $(cluster_mysql_dir "$i")/data/mysql ]] && fresh=0
	done
	if ((fresh)); then
		rm -f "$CLUSTER_STATE/mariadb-primary" # a new pair: mariadb-1 is its first primary
	fi
	for ((i = 1; i <= CLUSTER_MYSQL_NODES; i++)); do cluster_mysql_start "$i"; done
	cluster_mysql_roles
	cluster_writer_up
}

cluster_mariadb_down() {
	local i
	stop_pid mariadb-writer "$(cluster_writer_dir)/haproxy.pid"
	for ((i = 1; i <= CLUSTER_MYSQL_NODES; i++)); do stop_pid "mariadb-$i" "$(cluster_mysql_dir "$i")/mysqld.pid"; done
}

cluster_mariadb_status() {
	local rc=0 i line ro
	for ((i = 1; i <= CLUSTER_MYSQL_NODES; i++)); do
		if line=$(status_line "mariadb-$i" "$(cluster_mysql_dir "$i")/mysqld.pid" cluster_mysql_probe "$i"); then
			ro=$(cluster_mysql "$i" -N -e 'SELECT @@read_only' 2>/dev/null)
			if [[ -n $(cluster_mysql_slave_field "$i" Master_Port) ]]; then
				printf '%s  127.0.0.1:%s replica (io %s, sql %s, %s s behind, received gtid %s)\n' "$line" "$(cluster_mysql_port "$i")" \
					"$(cluster_mysql_slave_field "$i" Slave_IO_Running)" "$(cluster_mysql_slave_field "$i" Slave_SQL_Running)" \
					"$(cluster_mysql_slave_field "$i" Seconds_Behind_Master)" "$(cluster_mysql_slave_field "$i" Gtid_IO_Pos)"
			else
				printf '%s  127.0.0.1:%s %s (semi-sync %s, %s semi-sync replicas)\n' "$line" "$(cluster_mysql_port "$i")" \
					"$([[ $ro == 0 ]] && echo primary || echo 'read-only, replicating from nobody')" \
					"$(cluster_mysql "$i" -N -e "SHOW STATUS LIKE 'Rpl_semi_sync_master_status'" | cut -f2)" \
					"$(cluster_mysql "$i" -N -e "SHOW STATUS LIKE 'Rpl_semi_sync_master_clients'" | cut -f2)"
			fi
		else
			echo "$line"
			rc=1
		fi
	done
	if line=$(status_line mariadb-writer "$(cluster_writer_dir)/haproxy.pid" cluster_writer_probe); then
		printf '%s  127.0.0.1:%s -> mariadb-%s, reader 127.0.0.1:%s -> %s\n' "$line" "$CLUSTER_MYSQL_BASE" \
			"$(cluster_writer_node)" "$CLUSTER_MYSQL_READER_PORT" "$(reader=$(cluster_writer_node "$CLUSTER_MYSQL_READER_PORT") && [[ -n $reader ]] && echo "mariadb-$reader" || echo "none (no read-only server up)")"
	else
		echo "$line"
		rc=1
	fi
	return $rc
}

# cluster_mysql_failover: the recorded primary fenced (read-only, or stopped when it does not
# answer), the replica applies everything it received, is promoted, the writer address
# reaches it, and the old primary (when it answers) rejoins as its replica.
cluster_mysql_failover() {
	local old new pos start=$SECONDS
	old=$(cluster_mysql_primary)
	new=$(cluster_mysql_other "$old")
	cluster_mysql_probe "$new" || die "mariadb-$new (the replica) does not answer: nothing to promote"
	[[ -n $(cluster_mysql_slave_field "$new" Master_Port) ]] || die "mariadb-$new is not a replica"
	if cluster_mysql_probe "$old"; then
		# Fenced first: from here on it refuses every write (1290), and the writer address's
		# check drops it. Then everything it wrote must reach the replica.
		log "fencing mariadb-$old: read_only = 1"
		cluster_mysql "$old" -e 'SET GLOBAL read_only = 1'
		pos=$(cluster_mysql "$old" -N -e 'SELECT @@gtid_binlog_pos')
	else
		# Dead or hung: make sure it is stopped, so it cannot come back as a writer.
		local pidfile
		pidfile=$(cluster_mysql_dir "$old")/mysqld.pid
		if pid_alive "$pidfile"; then
			log "fencing mariadb-$old: it does not answer, SIGKILL (pid $(<"$pidfile"))"
			kill -KILL "$(<"$pidfile")" 2>/dev/null || true
			while pid_alive "$pidfile"; do sleep 0.05; done
		else
			log "fencing mariadb-$old: already stopped"
		fi
		# What the replica received (semi-sync: every acknowledged commit) is what it applies.
		pos=$(cluster_mysql_slave_field "$new" Gtid_IO_Pos)
	fi
	log "mariadb-$new applies up to GTID '$pos' (at most ${CLUSTER_MYSQL_APPLY_TIMEOUT}s)"
	local waited
	waited=$(cluster_mysql "$new" -N -e "SELECT MASTER_GTID_WAIT('$pos', $CLUSTER_MYSQL_APPLY_TIMEOUT)")
	[[ $waited == 0 ]] || die "mariadb-$new did not apply up to '$pos' in ${CLUSTER_MYSQL_APPLY_TIMEOUT}s; mariadb-$old stays fenced, nothing promoted"
	log "promoting mariadb-$new"
	cluster_mysql "$new" -e 'STOP SLAVE; RESET SLAVE ALL; SET GLOBAL rpl_semi_sync_master_enabled = 1; SET GLOBAL read_only = 0'
	echo "$new" >"$CLUSTER_STATE/mariadb-primary"
	local deadline=$((SECONDS + 30))
	until [[ $(cluster_writer_node) == "$new" ]]; do
		((SECONDS < deadline)) || die "the writer address does not reach mariadb-$new after 30s (see $(cluster_writer_dir)/haproxy.log)"
		sleep 0.1
	done
	if cluster_mysql_probe "$old"; then
		# The address's check marks the fenced server down and cuts the sessions still open to
		# it (they got 1290 meanwhile); done only once no service session is left there.
		deadline=$((SECONDS + 30))
		until [[ $(cluster_mysql "$old" -N -e "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = '$MYSQL_USER'") == 0 ]]; do
			if ((SECONDS >= deadline)); then
				cluster_mysql "$old" -e "SELECT ID, HOST, DB, COMMAND, TIME, STATE FROM information_schema.PROCESSLIST WHERE USER = '$MYSQL_USER'" >&2 || true
				die "sessions of $MYSQL_USER still open on the fenced mariadb-$old after 30s (above; see $(cluster_writer_dir)/haproxy.log)"
			fi
			sleep 0.1
		done
	fi
	log "the writer address reaches mariadb-$new, none reaches mariadb-$old ($((SECONDS - start))s after the fence)"
	if cluster_mysql_probe "$old"; then
		cluster_mysql_follow "$old" "$new"
	else
		log "mariadb-$old rejoins as a replica when started: 'stack start mariadb-$old --profile cluster'"
	fi
}

# ---------------------------------------------------------------- monitoring (opt-in)
# SECKILL_MONITORING=1 deploy/local/stack up --profile cluster (make monitor PROFILE=cluster):
# a Prometheus of the profile's own (beside the single stack's, which it does not touch) with
# deploy/monitoring/alerts.yml, scraping every instance of `make run PROFILE=cluster` on the
# ports deploy/local/run gives them (gateway i's admin listener 8190+i, consumer i 8290+i,
# reconciler i 8390+i; as many as SECKILL_GATEWAYS, SECKILL_CONSUMERS and SECKILL_RECONCILERS
# say, 2, 3 and 2 by default), the brokers' JMX exporters and each Redis node through one
# prometheus-redis-exporter.

CLUSTER_PROMETHEUS_PORT=${SECKILL_CLUSTER_PROMETHEUS_PORT:-19091}
CLUSTER_REDIS_EXPORTER_PORT=${SECKILL_CLUSTER_REDIS_EXPORTER_PORT:-19122}

# cluster_targets N BASE: the YAML list of 127.0.0.1:BASE+1 .. BASE+N.
cluster_targets() {
	local n=$1 base=$2 i out=()
	for ((i = 1; i <= n; i++)); do out+=("'127.0.0.1:$((base + i))'"); done
	(
		IFS=,
		echo "[${out[*]// /}]"
	)
}

# cluster_prometheus_config FILE TOKEN_FILE [RULES]: the cluster profile's Prometheus
# configuration, loading RULES (default: the source deploy/monitoring/alerts.yml); the gateways
# are scraped with the scrape credential in TOKEN_FILE (scrape_token_file).
cluster_prometheus_config() {
	local file=$1 token=$2 rules=${3:-} i
	local gateways=${SECKILL_GATEWAYS:-2} consumers=${SECKILL_CONSUMERS:-3} reconcilers=${SECKILL_RECONCILERS:-2}
	{
		cat <<-EOF
			# Written by deploy/local/cluster.sh (cluster_prometheus_config); edit the script, not this file.
			global:
			  scrape_interval: 5s
			  evaluation_interval: 15s
			  external_labels:
			    profile: cluster
			rule_files:
			  - ${rules:-$ROOT/deploy/monitoring/alerts.yml}
			scrape_configs:
			  - job_name: seckill-gateway
			    authorization:
			      credentials_file: $token
			    static_configs:
			      - targets: $(cluster_targets "$gateways" 8190)
			  - job_name: seckill-consumer
			    static_configs:
			      - targets: $(cluster_targets "$consumers" 8290)
			  - job_name: seckill-reconciler
			    static_configs:
			      - targets: $(cluster_targets "$reconcilers" 8390)
			  # Every Redis node through the exporter's /scrape?target=...: instance is the node.
			  - job_name: redis
			    metrics_path: /scrape
			    relabel_configs:
			      - source_labels: [__address__]
			        target_label: __param_target
			        replacement: redis://\$1
			      - source_labels: [__address__]
			        target_label: instance
			      - target_label: __address__
			        replacement: 127.0.0.1:$CLUSTER_REDIS_EXPORTER_PORT
			    static_configs:
		EOF
		for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do
			printf "      - targets: ['127.0.0.1:%s']\n        labels: {node: redis-%s}\n" "$(cluster_redis_port "$i")" "$i"
		done
		cat <<-EOF
			  # The brokers' JMX exporter agents (deploy/monitoring/kafka-jmx.yml).
			  - job_name: kafka
			    static_configs:
		EOF
		for ((i = 1; i <= CLUSTER_KAFKA_NODES; i++)); do
			printf "      - targets: ['127.0.0.1:%s']\n        labels: {node: kafka-%s}\n" "$(cluster_kafka_metrics_port "$i")" "$i"
		done
		cat <<-EOF
			  - job_name: prometheus
			    static_configs:
			      - targets: ['127.0.0.1:$CLUSTER_PROMETHEUS_PORT']
		EOF
	} >"$file"
}

cluster_monitoring_up() {
	install_monitoring_packages
	local dir=$CLUSTER_STATE/prometheus
	# The scrape token, the rules and the configuration, as for the single profile.
	prometheus_files "$dir" cluster_prometheus_config
	redis_exporter_start "$dir" "$CLUSTER_REDIS_EXPORTER_PORT" "redis://127.0.0.1:$(cluster_redis_port 1)" \
		"redis://127.0.0.1:$(cluster_redis_port 1)"
	prometheus_start "$dir" "$CLUSTER_PROMETHEUS_PORT"
}

cluster_monitoring_down() {
	stop_pid prometheus "$CLUSTER_STATE/prometheus/prometheus.pid"
	stop_pid redis_exporter "$CLUSTER_STATE/prometheus/redis_exporter.pid"
}

# cluster_monitoring_status: a line per monitoring process, only once monitoring was started.
cluster_monitoring_status() {
	local dir=$CLUSTER_STATE/prometheus rc=0
	[[ -f $dir/prometheus.pid || -f $dir/redis_exporter.pid ]] || return 0
	status_line prometheus "$dir/prometheus.pid" prometheus_probe "$CLUSTER_PROMETHEUS_PORT" || rc=1
	status_line redis_exporter "$dir/redis_exporter.pid" redis_exporter_probe "$CLUSTER_REDIS_EXPORTER_PORT" \
		"redis://127.0.0.1:$(cluster_redis_port 1)" || rc=1
	return $rc
}

# ---------------------------------------------------------------- commands

cluster_print_env() {
	cat <<-EOF
		export SECKILL_REDIS_ADDR=$(cluster_redis_addrs)
		export SECKILL_MYSQL_DSN='$MYSQL_USER:$MYSQL_PASSWORD@tcp(127.0.0.1:$CLUSTER_MYSQL_BASE)/$CLUSTER_MYSQL_DB?parseTime=true&clientFoundRows=true&loc=UTC&charset=utf8mb4&interpolateParams=true'
		export SECKILL_KAFKA_BROKERS=$(cluster_kafka_brokers)
		export SECKILL_CLUSTER=1
		export SECKILL_CLUSTER_REDIS_ADDR=$(cluster_redis_addrs)
		export SECKILL_CLUSTER_KAFKA_BROKERS=$(cluster_kafka_brokers)
		export SECKILL_CLUSTER_MYSQL_NODES=$(cluster_mysql_nodes)
		export SECKILL_MYSQL_REPLICA_DSN='$MYSQL_USER:$MYSQL_PASSWORD@tcp(127.0.0.1:$CLUSTER_MYSQL_READER_PORT)/$CLUSTER_MYSQL_DB?parseTime=true&clientFoundRows=true&loc=UTC&charset=utf8mb4&interpolateParams=true'
	EOF
}

cluster_up() {
	mkdir -p "$STATE" "$CACHE" "$CLUSTER_STATE"
	install_packages
	ensure_packages haproxy:haproxy
	local start=$SECONDS
	cluster_redis_up
	cluster_mariadb_up
	cluster_kafka_up
	if [[ ${SECKILL_MONITORING:-0} == 1 ]]; then
		cluster_monitoring_up
	fi
	cluster_print_env >"$CLUSTER_STATE/env"
	log "cluster ready in $((SECONDS - start))s; variables in $CLUSTER_STATE/env"
}

# The cluster's own nodes only (the single-node stack's servers are `stack down`'s).
cluster_down() {
	local i
	cluster_monitoring_down
	# The brokers at once: one after another, the last waits in its controlled shutdown for a
	# quorum that is already gone (and is killed after 30 s).
	for ((i = 1; i <= CLUSTER_KAFKA_NODES; i++)); do stop_pid "kafka-$i" "$CLUSTER_STATE/kafka-$i/kafka.pid" & done
	wait
	for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do stop_pid "redis-$i" "$CLUSTER_STATE/redis-$i/redis.pid"; done
	cluster_mariadb_down
}

cluster_status() {
	local rc=0 i role
	for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do
		if status_line "redis-$i" "$CLUSTER_STATE/redis-$i/redis.pid" cluster_redis_probe "$i" >"$CLUSTER_STATE/.status" 2>&1; then
			role=$(cluster_redis_cli "$i" role 2>/dev/null | head -n 1 | tr -d '\r')
			printf '%s  127.0.0.1:%s %s\n' "$(<"$CLUSTER_STATE/.status")" "$(cluster_redis_port "$i")" "${role/slave/replica}"
		else
			cat "$CLUSTER_STATE/.status"
			rc=1
		fi
	done
	rm -f "$CLUSTER_STATE/.status"
	local up=0
	for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do
		if cluster_redis_probe "$i"; then
			printf '%-8s cluster_state:%s, %s primaries with slots, %s nodes known (asked redis-%s)\n' "redis" \
				"$(cluster_redis_info "$i" cluster_state)" "$(cluster_redis_info "$i" cluster_size)" \
				"$(cluster_redis_info "$i" cluster_known_nodes)" "$i"
			[[ $(cluster_redis_info "$i" cluster_state) == ok ]] || rc=1
			up=1
			break
		fi
	done
	((up)) || rc=1
	cluster_mariadb_status || rc=1
	for ((i = 1; i <= CLUSTER_KAFKA_NODES; i++)); do
		if [[ -x $STATE/bin/kafkainit ]]; then
			if status_line "kafka-$i" "$CLUSTER_STATE/kafka-$i/kafka.pid" cluster_kafka_probe "$i" >"$CLUSTER_STATE/.status" 2>&1; then
				printf '%s  127.0.0.1:%s  metrics %s\n' "$(<"$CLUSTER_STATE/.status")" "$(cluster_kafka_port "$i")" \
					"$(curl -fsS -o /dev/null "http://127.0.0.1:$(cluster_kafka_metrics_port "$i")/metrics" 2>/dev/null &&
						echo "127.0.0.1:$(cluster_kafka_metrics_port "$i")" || echo "not served (started without the JMX exporter: stop and start it)")"
			else
				cat "$CLUSTER_STATE/.status"
				rc=1
			fi
		else
			printf '%-8s down\n' "kafka-$i"
			rc=1
		fi
	done
	rm -f "$CLUSTER_STATE/.status"
	if [[ -x $STATE/bin/kafkainit ]] && ((rc == 0)); then
		# The active controller (the KRaft quorum's leader), from Kafka's own tool.
		cluster_kafka_quorum | awk '/^LeaderId:/ {l=$2} /^LeaderEpoch:/ {e=$2} /^MaxFollowerLag:/ {g=$2}
			END {printf "%-8s active controller kafka-%s (epoch %s), max follower lag %s\n", "kraft", l, e, g}' || rc=1
		# Leaders and in-sync replicas of the grab topic's partitions.
		"$STATE/bin/kafkainit" -brokers "$(cluster_kafka_brokers)" -describe -timeout 10s 2>&1 |
			awk '/^topic/ {t=$2} t ~ /seckill.grab$/ {print}' || rc=1
	fi
	cluster_monitoring_status || rc=1
	return $rc
}

# cluster_node_pidfile NODE: the PID file of kafka-1..3 or redis-1..6.
cluster_node_pidfile() {
	case $1 in
	kafka-[1-3]) echo "$CLUSTER_STATE/$1/kafka.pid" ;;
	redis-[1-6]) echo "$CLUSTER_STATE/$1/redis.pid" ;;
	mariadb-[1-2]) echo "$CLUSTER_STATE/$1/mysqld.pid" ;;
	*) die "unknown cluster node '$1' (kafka-1..3, redis-1..6, mariadb-1..2)" ;;
	esac
}

# cluster_node CMD NODE: kill (SIGKILL), stop (SIGTERM) or start one node.
cluster_node() {
	local cmd=$1 node=$2 pidfile pid
	pidfile=$(cluster_node_pidfile "$node")
	case $cmd in
	kill)
		pid_alive "$pidfile" || die "$node is not running"
		pid=$(<"$pidfile")
		log "killing $node (pid $pid, SIGKILL)"
		kill -CONT "$pid" 2>/dev/null || true # a paused process must be able to die
		kill -KILL "$pid"
		while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
		;;
	stop) stop_pid "$node" "$pidfile" ;;
	start)
		case $node in
		redis-*) cluster_redis_start "${node#redis-}" ;;
		mariadb-*)
			# Read-only at start; writable again only if it is still the recorded primary,
			# else it rejoins as the primary's replica.
			cluster_mysql_start "${node#mariadb-}"
			cluster_mysql_roles
			;;
		kafka-*)
			[[ -x $STATE/bin/kafkainit ]] || cluster_kafka_build_init
			cluster_kafka_launch "${node#kafka-}"
			cluster_kafka_wait "${node#kafka-}"
			;;
		esac
		;;
	esac
}
