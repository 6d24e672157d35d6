# shellcheck shell=bash
# deploy/local/secure.sh: the secure profile of deploy/local/stack, which sources it
# (`deploy/local/stack up|down|status|env --profile secure`). The same real servers as the
# single-node stack, locked down as production runs them, on 127.0.0.1 only and on ports of
# their own (beside the plain stack), with all state under $STATE/secure:
#
#   redis    TLS only (port 0, tls-port), ACL users (default off): one per service with only
#            the commands and keys it needs, and a test user; noeviction, AOF everysec
#   kafka    Apache Kafka 4.4.0 (KRaft): clients only over SASL_SSL with SCRAM-SHA-512 (users
#            made at format time); StandardAuthorizer with topic and group ACLs per service
#            principal; the controller listener is TLS with client certificates
#   mariadb  require_secure_transport=ON (TLS or the root's local socket), a DDL user that
#            migrates, a DML user the services run as, and a test user
#
# Certificates (a private CA; server certificates for 127.0.0.1 and localhost; the Kafka
# controller's certificate, also its client certificate) are made once with openssl and kept
# in $STATE/secure/certs; secrets are random, made once, kept in $STATE/secure/secrets
# (mode 600) and handed to the services and tests as *_FILE paths, never on a command line.
# The README's "The secure profile" section lists the ACLs and GRANTs made here.

SECURE_STATE=$STATE/secure
SECURE_REDIS_PORT=${SECKILL_SECURE_REDIS_PORT:-26390}
SECURE_MYSQL_PORT=${SECKILL_SECURE_MYSQL_PORT:-23306}
SECURE_KAFKA_PORT=${SECKILL_SECURE_KAFKA_PORT:-24092}
SECURE_KAFKA_CONTROLLER_PORT=${SECKILL_SECURE_KAFKA_CONTROLLER_PORT:-24093}
SECURE_MYSQL_DB=seckill
SECURE_MYSQL_TEST_DB=seckill_tests
SECURE_CERTS=$SECURE_STATE/certs
SECURE_SECRETS=$SECURE_STATE/secrets
# The services' principals (one user per service on each server) and the tests' own user.
SECURE_SERVICES=(gateway consumer reconciler)

# ---------------------------------------------------------------- secrets and certificates

# secure_secret NAME: the path of secret NAME, made (32 random hex bytes, mode 600) if missing.
secure_secret() {
	local f=$SECURE_SECRETS/$1
	if [[ ! -s $f ]]; then
		mkdir -p "$SECURE_SECRETS"
		chmod 700 "$SECURE_SECRETS"
		(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$f")
	fi
	echo "$f"
}

# secure_cert NAME CN SAN [clientAuth]: a key and a certificate signed by the stack's CA.
secure_cert() {
	local name=$1 cn=$2 san=$3 usage=serverAuth
	[[ ${4:-} == client ]] && usage=serverAuth,clientAuth
	[[ -s $SECURE_CERTS/$name.pem && -s $SECURE_CERTS/$name-key.pem ]] && return
	(umask 077 && openssl genrsa -out "$SECURE_CERTS/$name-key.pem" 2048 2>/dev/null)
	openssl req -new -key "$SECURE_CERTS/$name-key.pem" -subj "/CN=$cn" \
		-out "$SECURE_CERTS/$name.csr" 2>/dev/null
	printf 'subjectAltName=%s\nextendedKeyUsage=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n' \
		"$san" "$usage" >"$SECURE_CERTS/$name.ext"
	openssl x509 -req -in "$SECURE_CERTS/$name.csr" -CA "$SECURE_CERTS/ca.pem" \
		-CAkey "$SECURE_CERTS/ca-key.pem" -CAcreateserial -days 825 -sha256 \
		-extfile "$SECURE_CERTS/$name.ext" -out "$SECURE_CERTS/$name.pem" 2>/dev/null ||
		die "openssl could not sign the $name certificate"
	rm -f "$SECURE_CERTS/$name.csr" "$SECURE_CERTS/$name.ext"
}

# secure_certs: the private CA and the certificates, made once. A second CA (other-ca.pem),
# which signed nothing here, lets the tests show that an unknown CA is refused.
secure_certs() {
	mkdir -p "$SECURE_CERTS"
	chmod 700 "$SECURE_CERTS"
	local ca
	for ca in ca other-ca; do
		[[ -s $SECURE_CERTS/$ca.pem ]] && continue
		log "making the secure profile's $ca (openssl)"
		(umask 077 && openssl genrsa -out "$SECURE_CERTS/$ca-key.pem" 2048 2>/dev/null)
		openssl req -x509 -new -key "$SECURE_CERTS/$ca-key.pem" -sha256 -days 3650 \
			-subj "/CN=seckill local $ca" -addext basicConstraints=critical,CA:TRUE \
			-addext keyUsage=critical,keyCertSign,cRLSign -out "$SECURE_CERTS/$ca.pem" 2>/dev/null ||
			die "openssl could not make $ca"
	done
	local san=IP:127.0.0.1,DNS:localhost
	secure_cert redis localhost "$san"
	secure_cert mariadb localhost "$san"
	secure_cert kafka kafka-broker "$san" client
	# Kafka reads PEM: the key (PKCS#8) and the certificate in one file.
	if [[ ! -s $SECURE_CERTS/kafka-keystore.pem ]]; then
		(umask 077 && {
			openssl pkcs8 -topk8 -nocrypt -in "$SECURE_CERTS/kafka-key.pem"
			cat "$SECURE_CERTS/kafka.pem"
		} >"$SECURE_CERTS/kafka-keystore.pem")
	fi
}

# ---------------------------------------------------------------- Redis (TLS only, ACL users)

# The commands each Redis user may run, on keys sk:* only (the gate's keys, pkg/stock) and no
# channel. Every user that runs the gate's Lua scripts needs the commands inside them too:
# Redis checks a script's calls against the caller's ACL. INFO is the eviction-policy check
# (stock.Dial reads maxmemory_policy from INFO memory; CONFIG is left out). SCRIPT LOAD: the
# services load the gate's scripts at start-up (stock.NewGate); SCRIPT FLUSH is left out.
SECURE_REDIS_BASE='+ping +info +hello +client|setname +cluster|info +cluster|slots +cluster|shards +cluster|nodes'
SECURE_REDIS_SCRIPTS='+eval +evalsha +script|load +script|exists +del +exists +get +set +hdel +hget +hincrby +hlen +hmget +hset +hsetnx +pexpireat'

# secure_redis_acl USER: the command rules of USER.
secure_redis_acl() {
	case $1 in
	# Grabs (reserve script), lookups and stock snapshots; the admin API loads and adjusts
	# stock with the same scripts. HEXISTS and WAIT: a grab whose produce failed waits for a
	# replica to hold its reservation (stock.Gate.AwaitReplica; off without replicas).
	# INCRBY and PEXPIRE count a stock bucket's demand; SET with a TTL marks a dry bucket
	# wanted (stock.Gate.AddDemand, MarkWanted; docs/design.md).
	gateway) echo "$SECURE_REDIS_BASE $SECURE_REDIS_SCRIPTS +pttl +hexists +wait +incrby +pexpire" ;;
	# Settles outcomes and returns units (scripts), reads reservations.
	consumer) echo "$SECURE_REDIS_BASE $SECURE_REDIS_SCRIPTS +pttl" ;;
	# Reconciles the gate with MySQL: snapshot, correct, rebuild and remove scripts, and
	# pages through reservations with HSCAN; GETDEL reads and resets a stock bucket's demand
	# counter (the rebalance loop, docs/design.md).
	reconciler) echo "$SECURE_REDIS_BASE $SECURE_REDIS_SCRIPTS +pttl +hscan +getdel" ;;
	esac
}

secure_redis_cli() { # user args...
	local user=$1
	shift
	REDISCLI_AUTH=$(<"$(secure_secret "redis-$user")") redis-cli --no-auth-warning --tls \
		--cacert "$SECURE_CERTS/ca.pem" -h 127.0.0.1 -p "$SECURE_REDIS_PORT" --user "$user" "$@"
}

secure_redis_probe() { [[ $(secure_redis_cli test ping 2>/dev/null) == PONG ]]; }

secure_redis_up() {
	local dir=$SECURE_STATE/redis u hash
	mkdir -p "$dir"
	if serves "$dir/redis.pid" "$SECURE_REDIS_PORT" secure_redis_probe; then
		log "secure redis already running on 127.0.0.1:$SECURE_REDIS_PORT (TLS)"
		return
	fi
	ports_free "secure redis" "$SECURE_REDIS_PORT:SECKILL_SECURE_REDIS_PORT"
	# Passwords as SHA-256 (#hash), so the config holds no secret; still mode 600.
	(umask 077 && : >"$dir/redis.conf")
	(
		cat <<-EOF
			bind 127.0.0.1
			port 0
			tls-port $SECURE_REDIS_PORT
			tls-cert-file $SECURE_CERTS/redis.pem
			tls-key-file $SECURE_CERTS/redis-key.pem
			tls-ca-cert-file $SECURE_CERTS/ca.pem
			tls-auth-clients optional
			tls-protocols "TLSv1.2 TLSv1.3"
			protected-mode yes
			daemonize no
			dir $dir
			logfile $dir/redis.log
			appendonly yes
			appendfsync everysec
			appendfilename "appendonly.aof"
			maxmemory 1gb
			maxmemory-policy noeviction
			user default off
		EOF
		for u in "${SECURE_SERVICES[@]}"; do
			hash=$(tr -d '\n' <"$(secure_secret "redis-$u")" | sha256sum | cut -d' ' -f1)
			echo "user $u on #$hash resetkeys ~sk:* resetchannels -@all $(secure_redis_acl "$u")"
		done
		# The tests' user: every command on every key (tests flush script caches, list and
		# delete their own keys); a separate user from the services'.
		hash=$(tr -d '\n' <"$(secure_secret redis-test)" | sha256sum | cut -d' ' -f1)
		echo "user test on #$hash ~* &* +@all"
	) >"$dir/redis.conf"
	log "starting secure redis on 127.0.0.1:$SECURE_REDIS_PORT (TLS only, ACL users)"
	setsid "$(command -v redis-server)" "$dir/redis.conf" >>"$dir/redis.out" 2>&1 </dev/null &
	echo $! >"$dir/redis.pid"
	wait_ready "secure redis" "$dir/redis.pid" "$dir/redis.log" "$SECURE_REDIS_PORT" secure_redis_probe
}

# ---------------------------------------------------------------- MariaDB (TLS required)

secure_mysql_root() { mariadb --no-defaults -uroot -S "$SECURE_STATE/mariadb/mysqld.sock" "$@"; }
secure_mysql_probe() { secure_mysql_root -N -e 'SELECT 1'; }

secure_mariadb_up() {
	local dir=$SECURE_STATE/mariadb
	mkdir -p "$dir"
	if serves "$dir/mysqld.pid" "$SECURE_MYSQL_PORT" secure_mysql_probe; then
		log "secure mariadb already running on 127.0.0.1:$SECURE_MYSQL_PORT"
	else
		ports_free "secure mariadb" "$SECURE_MYSQL_PORT:SECKILL_SECURE_MYSQL_PORT"
		mariadb_datadir "$dir" "the secure mariadb"
		log "starting secure mariadb on 127.0.0.1:$SECURE_MYSQL_PORT (require_secure_transport)"
		# The root's local socket counts as secure transport; TCP clients must use TLS.
		setsid "$(command -v mariadbd)" --no-defaults --datadir="$dir/data" --user="$(id -un)" \
			--bind-address=127.0.0.1 --port="$SECURE_MYSQL_PORT" --socket="$dir/mysqld.sock" \
			--pid-file="$dir/mariadbd.pid" --log-error="$dir/mariadb.log" \
			--ssl-ca="$SECURE_CERTS/ca.pem" --ssl-cert="$SECURE_CERTS/mariadb.pem" \
			--ssl-key="$SECURE_CERTS/mariadb-key.pem" --require-secure-transport=ON \
			--tls-version=TLSv1.2,TLSv1.3 >>"$dir/mariadb.out" 2>&1 </dev/null &
		echo $! >"$dir/mysqld.pid"
		wait_ready "secure mariadb" "$dir/mysqld.pid" "$dir/mariadb.log" "$SECURE_MYSQL_PORT" secure_mysql_probe
	fi
	# The users, with the passwords from their files (read by the server from stdin, never on
	# a command line). Both hosts, as the plain stack: a TCP client is 127.0.0.1. No REQUIRE
	# SSL on the users: require_secure_transport refuses every plaintext TCP client already,
	# and with its own words ("insecure transport"), where REQUIRE SSL answers "Access denied".
	local migrate app test host sql=""
	migrate=$(<"$(secure_secret mysql-migrate)")
	app=$(<"$(secure_secret mysql-app)")
	test=$(<"$(secure_secret mysql-test)")
	# The pipeline's database, and the tests' user's own: tests create and drop a database
	# each (stacktest: seckill_t_<id>; the chaos set: seckill_chaos_<id>), never the pipeline's.
	sql+="CREATE DATABASE IF NOT EXISTS \`$SECURE_MYSQL_DB\`; CREATE DATABASE IF NOT EXISTS \`$SECURE_MYSQL_TEST_DB\`;"
	for host in 127.0.0.1 localhost; do
		sql+="
			CREATE OR REPLACE USER 'seckill_migrate'@'$host' IDENTIFIED BY '$migrate';
			GRANT ALL PRIVILEGES ON \`$SECURE_MYSQL_DB\`.* TO 'seckill_migrate'@'$host';
			CREATE OR REPLACE USER 'seckill_app'@'$host' IDENTIFIED BY '$app';
			GRANT SELECT, INSERT, UPDATE, DELETE ON \`$SECURE_MYSQL_DB\`.* TO 'seckill_app'@'$host';
			CREATE OR REPLACE USER 'seckill_test'@'$host' IDENTIFIED BY '$test';
			GRANT ALL PRIVILEGES ON \`seckill\\_t%\`.* TO 'seckill_test'@'$host';
			GRANT ALL PRIVILEGES ON \`seckill\\_chaos\\_%\`.* TO 'seckill_test'@'$host';"
	done
	sql+="FLUSH PRIVILEGES;"
	secure_mysql_root <<<"$sql" || die "could not create the secure mariadb users"
}

# ---------------------------------------------------------------- Kafka (SASL_SSL, ACLs)

# The admin client configuration of Kafka's own tools (AclCommand), mode 600.
secure_kafka_admin_config() {
	local f=$SECURE_STATE/kafka/admin.properties
	(
		umask 077
		cat >"$f" <<-EOF
			security.protocol=SASL_SSL
			sasl.mechanism=SCRAM-SHA-512
			sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(<"$(secure_secret kafka-admin)")";
			ssl.truststore.type=PEM
			ssl.truststore.location=$SECURE_CERTS/ca.pem
		EOF
	)
	echo "$f"
}

# secure_kafka_as USER CMD...: runs kafkainit (and other Go tools) as USER.
secure_kafka_as() { # user cmd...
	local user=$1
	shift
	SECKILL_KAFKA_SASL_MECHANISM=scram-sha-512 SECKILL_KAFKA_USERNAME=$user \
		SECKILL_KAFKA_PASSWORD_FILE=$(secure_secret "kafka-$user") SECKILL_KAFKA_PASSWORD='' \
		SECKILL_KAFKA_TLS=true SECKILL_KAFKA_CA_FILE=$SECURE_CERTS/ca.pem \
		SECKILL_KAFKA_CERT_FILE='' SECKILL_KAFKA_KEY_FILE='' SECKILL_KAFKA_TLS_SERVER_NAME='' "$@"
}

secure_kafka_probe() {
	secure_kafka_as admin "$STATE/bin/kafkainit" -brokers "127.0.0.1:$SECURE_KAFKA_PORT" -probe -timeout 2s
}

secure_kafka_up() {
	local dir=$SECURE_STATE/kafka
	mkdir -p "$dir" "$STATE/bin"
	(cd "$ROOT" && go build -o "$STATE/bin/kafkainit" ./deploy/local/kafkainit) ||
		die "could not build deploy/local/kafkainit"
	if serves "$dir/kafka.pid" "$SECURE_KAFKA_PORT" secure_kafka_probe; then
		log "secure kafka already running on 127.0.0.1:$SECURE_KAFKA_PORT (SASL_SSL)"
	else
		ports_free "secure kafka" "$SECURE_KAFKA_PORT:SECKILL_SECURE_KAFKA_PORT" \
			"$SECURE_KAFKA_CONTROLLER_PORT:SECKILL_SECURE_KAFKA_CONTROLLER_PORT"
		fetch_kafka
		local admin_pw
		admin_pw=$(<"$(secure_secret kafka-admin)")
		# One SASL_SSL listener for clients and the broker itself (as admin, a super user);
		# the KRaft controller listener is TLS with client certificates (the broker's own,
		# CN=kafka-broker, a super user): SCRAM cannot authenticate to a controller, and an anonymous
		# controller listener would be a super user's door. No plaintext listener.
		(
			umask 077
			cat >"$dir/server.properties" <<-EOF
				process.roles=broker,controller
				node.id=1
				controller.quorum.voters=1@127.0.0.1:$SECURE_KAFKA_CONTROLLER_PORT
				listeners=SASL_SSL://127.0.0.1:$SECURE_KAFKA_PORT,CONTROLLER://127.0.0.1:$SECURE_KAFKA_CONTROLLER_PORT
				advertised.listeners=SASL_SSL://127.0.0.1:$SECURE_KAFKA_PORT
				controller.listener.names=CONTROLLER
				inter.broker.listener.name=SASL_SSL
				listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL
				sasl.enabled.mechanisms=SCRAM-SHA-512
				sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
				listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin_pw";
				ssl.keystore.type=PEM
				ssl.keystore.location=$SECURE_CERTS/kafka-keystore.pem
				ssl.truststore.type=PEM
				ssl.truststore.location=$SECURE_CERTS/ca.pem
				ssl.endpoint.identification.algorithm=https
				listener.name.controller.ssl.client.auth=required
				ssl.principal.mapping.rules=RULE:^CN=([^,]+)\$/\$1/,DEFAULT
				authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
				allow.everyone.if.no.acl.found=false
				super.users=User:admin;User:kafka-broker
				log.dirs=$dir/data
				offsets.topic.replication.factor=1
				transaction.state.log.replication.factor=1
				transaction.state.log.min.isr=1
				share.coordinator.state.topic.replication.factor=1
				share.coordinator.state.topic.min.isr=1
			EOF
		)
		kafka_log4j2 "$dir"
		local java_opts
		mapfile -t java_opts < <(kafka_jvm_opts "$dir")
		java_opts=(-Xms256m -Xmx768m "${java_opts[@]}"
			-Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$KAFKA_LIBS/*")
		if [[ ! -f $dir/data/meta.properties ]]; then
			# The SCRAM users go into the bootstrap metadata at format time (the broker
			# itself logs in as admin). The passwords reach the tool through a file of
			# arguments (@file, mode 600), not its command line.
			local cluster_id u args=$dir/format.args
			cluster_id=$(kafka_cluster_id)
			(
				umask 077
				printf '%s\n' format -t "$cluster_id" -c "$dir/server.properties"
				for u in admin test "${SECURE_SERVICES[@]}"; do
					printf -- '--add-scram\nSCRAM-SHA-512=[name=%s,password=%s]\n' "$u" "$(<"$(secure_secret "kafka-$u")")"
				done
			) >"$args"
			log "formatting secure kafka storage (cluster $cluster_id) with SCRAM users admin, test, ${SECURE_SERVICES[*]}"
			local rc=0
			java "${java_opts[@]}" kafka.tools.StorageTool "@$args" >"$dir/format.log" 2>&1 || rc=$?
			rm -f "$args"
			((rc == 0)) || { tail -n 40 "$dir/format.log" >&2; die "secure kafka storage format failed"; }
		fi
		log "starting secure kafka $KAFKA_VERSION (KRaft) on 127.0.0.1:$SECURE_KAFKA_PORT (SASL_SSL)"
		setsid java "${java_opts[@]}" kafka.Kafka "$dir/server.properties" \
			>>"$dir/kafka.out" 2>&1 </dev/null &
		echo $! >"$dir/kafka.pid"
		wait_ready "secure kafka" "$dir/kafka.pid" "$dir/server.log" "$SECURE_KAFKA_PORT" secure_kafka_probe
	fi
	secure_kafka_as admin "$STATE/bin/kafkainit" -brokers "127.0.0.1:$SECURE_KAFKA_PORT" -timeout 60s \
		>"$dir/topics.log" 2>&1 || { cat "$dir/topics.log" >&2; die "secure kafka topics could not be created"; }
	secure_kafka_acls
}

# SECURE_KAFKA_ACLS: principal|resource flag|names|operation[|prefixed], one AclCommand a
# line (the README's table). READ and WRITE on a topic imply DESCRIBE; READ on a group allows joining it
# and committing its offsets, DESCRIBE reading them (lag).
SECURE_KAFKA_ACLS=(
	# Publishes grabs; a grab the gate took back after a failed publish is compensated; reads
	# the consumers' lag for admission control.
	"gateway|--topic|seckill.grab,seckill.compensation|Write"
	"gateway|--group|seckill-orders|Describe"
	# Consumes grabs and order feedback in its two groups; writes orders (and reads them back
	# to find what its outbox already published), compensations and dead letters.
	"consumer|--topic|seckill.grab,seckill.order-feedback,seckill.order|Read"
	"consumer|--topic|seckill.order,seckill.compensation,seckill.deadletter|Write"
	"consumer|--group|seckill-orders,seckill-order-feedback|Read"
	# Re-publishes lost grabs, replays compensations, dead-letters what it gives up on,
	# reads the topics' offsets and the groups' lag.
	"reconciler|--topic|seckill.grab,seckill.deadletter|Write"
	"reconciler|--topic|seckill.compensation|Read"
	"reconciler|--topic|seckill.order-feedback|Describe"
	# Reads the topics' min.insync.replicas for its partition health gauges.
	"reconciler|--topic|seckill.grab,seckill.compensation,seckill.order-feedback,seckill.deadletter|DescribeConfigs"
	"reconciler|--group|seckill-orders,seckill-order-feedback|Describe"
	# The tests' user: everything on the topics and groups the tests make for themselves
	# (stacktest: t<id>.seckill.*, t-orders-<id>; the chaos set: chaos<id>.*, chaos-*), nothing
	# on the pipeline's own topics...
	"test|--topic|t,chaos|All|prefixed"
	"test|--group|t-,chaos-|All|prefixed"
	# ...and DESCRIBE on the pipeline's topics and groups (metadata, offsets, lag), which a
	# test's gateway checks at start-up when it runs with the default names.
	"test|--topic|seckill.|Describe|prefixed"
	"test|--group|seckill-|Describe|prefixed"
)

# secure_kafka_acls: creates the ACLs as admin through Kafka's own AclCommand over SASL_SSL
# (adding an ACL that exists changes nothing); skipped when the table is unchanged.
secure_kafka_acls() {
	local dir=$SECURE_STATE/kafka conf line p flag names op pattern n
	conf=$(secure_kafka_admin_config)
	if [[ -f $dir/acls.done ]] && cmp -s "$dir/acls.done" <(printf '%s\n' "${SECURE_KAFKA_ACLS[@]}"); then
		return
	fi
	log "creating the secure kafka ACLs (${#SECURE_KAFKA_ACLS[@]} AclCommand runs)"
	: >"$dir/acls.log"
	for line in "${SECURE_KAFKA_ACLS[@]}"; do
		IFS='|' read -r p flag names op pattern <<<"$line"
		local args=(--bootstrap-server "127.0.0.1:$SECURE_KAFKA_PORT" --command-config "$conf"
			--add --allow-principal "User:$p" --operation "$op" --resource-pattern-type "${pattern:-literal}")
		IFS=, read -r -a n <<<"$names"
		for name in "${n[@]}"; do args+=("$flag" "$name"); done
		java -Xmx256m -cp "$KAFKA_LIBS/*" org.apache.kafka.tools.AclCommand "${args[@]}" >>"$dir/acls.log" 2>&1 ||
			{ tail -n 40 "$dir/acls.log" >&2; die "kafka AclCommand failed for User:$p ($op on $names)"; }
	done
	printf '%s\n' "${SECURE_KAFKA_ACLS[@]}" >"$dir/acls.done"
}

# ---------------------------------------------------------------- commands

# secure_print_env: the variables of the tests: every server as the tests' own users, secrets
# as *_FILE paths; SECKILL_SECURE_DIR lets the refusal tests find the services' own secrets and
# the unknown CA; SECKILL_MYSQL_ROOT_DSN (the root's local socket, no password) lets
# pkg/store's user tests create users on this server.
secure_print_env() {
	cat <<-EOF
		export SECKILL_SECURE=1
		export SECKILL_SECURE_DIR=$SECURE_STATE
		export SECKILL_REDIS_ADDR=127.0.0.1:$SECURE_REDIS_PORT
		export SECKILL_REDIS_USERNAME=test
		export SECKILL_REDIS_PASSWORD_FILE=$(secure_secret redis-test)
		export SECKILL_REDIS_TLS=true
		export SECKILL_REDIS_CA_FILE=$SECURE_CERTS/ca.pem
		export SECKILL_MYSQL_DSN='seckill_test@tcp(127.0.0.1:$SECURE_MYSQL_PORT)/$SECURE_MYSQL_TEST_DB?parseTime=true&clientFoundRows=true&loc=UTC&charset=utf8mb4&interpolateParams=true'
		export SECKILL_MYSQL_PASSWORD_FILE=$(secure_secret mysql-test)
		export SECKILL_MYSQL_TLS=true
		export SECKILL_MYSQL_CA_FILE=$SECURE_CERTS/ca.pem
		export SECKILL_MYSQL_ROOT_DSN='root@unix($SECURE_STATE/mariadb/mysqld.sock)/'
		export SECKILL_KAFKA_BROKERS=127.0.0.1:$SECURE_KAFKA_PORT
		export SECKILL_KAFKA_SASL_MECHANISM=scram-sha-512
		export SECKILL_KAFKA_USERNAME=test
		export SECKILL_KAFKA_PASSWORD_FILE=$(secure_secret kafka-test)
		export SECKILL_KAFKA_TLS=true
		export SECKILL_KAFKA_CA_FILE=$SECURE_CERTS/ca.pem
	EOF
}

secure_up() {
	mkdir -p "$STATE" "$CACHE" "$SECURE_STATE"
	install_packages
	ensure_packages openssl:openssl
	local start=$SECONDS
	secure_certs
	secure_redis_up
	secure_mariadb_up
	secure_kafka_up
	secure_print_env >"$SECURE_STATE/env"
	log "secure profile ready in $((SECONDS - start))s; variables in $SECURE_STATE/env"
}

secure_down() {
	stop_pid "secure kafka" "$SECURE_STATE/kafka/kafka.pid"
	stop_pid "secure mariadb" "$SECURE_STATE/mariadb/mysqld.pid"
	stop_pid "secure redis" "$SECURE_STATE/redis/redis.pid"
}

secure_status() {
	local rc=0
	if [[ ! -d $SECURE_SECRETS ]]; then
		printf '%-8s down\n' redis mariadb kafka
		return 1
	fi
	status_line redis "$SECURE_STATE/redis/redis.pid" secure_redis_probe || rc=1
	status_line mariadb "$SECURE_STATE/mariadb/mysqld.pid" secure_mysql_probe || rc=1
	if [[ -x $STATE/bin/kafkainit && -s $SECURE_SECRETS/kafka-admin ]]; then
		status_line kafka "$SECURE_STATE/kafka/kafka.pid" secure_kafka_probe || rc=1
	else
		printf '%-8s down\n' kafka
		rc=1
	fi
	return $rc
}
