-- Stock adjustment of a prize with stock buckets (docs/buckets.md, "Stock adjustment"): the
-- transfers journal gets an "outside" end, bucket -1. A raise is a transfer from -1 into a
-- bucket, a cut one from a bucket to -1, journaled and run by the reconciler with the same
-- fenced, resumable steps as a transfer between two buckets. -1 rather than NULL: the
-- columns stay NOT NULL, every reader keeps comparing integers, and NULL would pass a CHECK
-- (unknown is not false), so a row from nowhere to nowhere would need its own guard.
-- The new constraint is added before the old one is dropped: in between both hold, and a
-- run stopped there is finished by the next (each statement has its guard).

-- unless constraint bucket_transfers.ck_bucket_transfer_ends
ALTER TABLE bucket_transfers ADD CONSTRAINT ck_bucket_transfer_ends CHECK (from_bucket >= -1 AND to_bucket >= -1 AND from_bucket <> to_bucket);

-- if constraint bucket_transfers.ck_bucket_transfer_buckets
ALTER TABLE bucket_transfers DROP CONSTRAINT ck_bucket_transfer_buckets;
