// Package securetest holds the tests of the secure profile (`deploy/local/stack up --profile
// secure`: Redis with TLS and ACL users, Kafka with SASL_SSL and ACLs, MariaDB requiring TLS):
// the services start as their own users, and a wrong password, an unknown CA, a missing ACL
// and a plaintext attempt are each refused at start-up with the server, the user and the
// reason named. They run only with the profile's variables loaded ($STATE/secure/env sets
// SECKILL_SECURE=1) and are skipped otherwise; with SECKILL_SECURE=1 anything missing fails.
package securetest
