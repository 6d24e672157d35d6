# shellcheck shell=bash
# deploy/local/secrets.sh: the local-only secrets of `make run` and `make monitor`, sourced by
# deploy/local/run and deploy/local/stack so both make and read them one way.
#
# .state/dev-secrets holds, one VAR=value a line (mode 600, made once and kept, so tokens
# printed once stay valid across restarts):
#   SECKILL_ADMIN_TOKEN   the gateway's admin credential (the audit's "admin")
#   SECKILL_JWT_SECRET    the key of user tokens
#   SECKILL_SCRAPE_TOKEN  Prometheus's credential: role scrape, /metrics only (issue 39: the
#                         scrape credential must not adjust stock or read pprof)
# A file written before a variable existed gets it added; values already there are kept (and
# the file made mode 600 if it was not).
# Sourcing defines functions only.

# dev_secrets FILE: makes FILE, or adds to it whichever variable it lacks.
dev_secrets() {
	local file=$1 spec name bytes
	(
		umask 077
		touch "$file"
		chmod 600 "$file"
		for spec in SECKILL_ADMIN_TOKEN:24 SECKILL_JWT_SECRET:48 SECKILL_SCRAPE_TOKEN:24; do
			name=${spec%%:*} bytes=${spec#*:}
			if ! grep -q "^$name=" "$file"; then
				echo "$name=$(head -c "$bytes" /dev/urandom | base64 | tr -d '/+=')" >>"$file"
			fi
		done
	)
}

# dev_secret FILE NAME: the value of NAME in the dev secrets FILE (made or completed first).
dev_secret() {
	dev_secrets "$1"
	sed -n "s/^$2=//p" "$1"
}

# SCRAPE_CREDENTIAL is the name Prometheus's scrape token carries in the gateway's tokens file
# (and so in its logs of refused calls).
SCRAPE_CREDENTIAL=prometheus

# scrape_token_line TOKEN: the admin tokens file line (gateway/operator's format) of
# Prometheus's credential with TOKEN, role scrape.
scrape_token_line() {
	printf '%s sha256:%s scrape\n' "$SCRAPE_CREDENTIAL" "$(printf %s "$1" | sha256sum | cut -d' ' -f1)"
}

# dev_admin_tokens FILE TOKEN: writes the gateway's admin tokens file of `make run`
# (SECKILL_ADMIN_TOKENS_FILE), Prometheus's scrape credential its one line; rewritten only when
# it changes (the gateway re-reads the file on every change).
dev_admin_tokens() {
	local file=$1 want
	want="# Written by deploy/local/run (dev_admin_tokens, deploy/local/secrets.sh); edit the script.
$(scrape_token_line "$2")"
	if [[ ! -f $file || $(<"$file") != "$want" ]]; then
		(umask 077 && printf '%s\n' "$want" >"$file.tmp" && mv "$file.tmp" "$file")
	fi
}
