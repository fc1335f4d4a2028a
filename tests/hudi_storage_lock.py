"""A second contender for Hudi's storage-based lock, written from the rules of Hudi's Java
`StorageBasedLockProvider` and `S3StorageLockClient` (not from pg_hudi's code): the lock object
`<table>/.hoodie/.locks/table_lock.json` holds `{"expired":bool,"validUntil":ms,"owner":uuid}`;
it is free when absent, expired, or more than 500 ms past validUntil; a contender takes it with a
PUT conditional on what it read (If-None-Match: * when absent, else If-Match: the ETag read) and
releases it with a PUT of expired=true conditional on its own ETag. A 412 means another writer
won."""

import json
import time
import uuid

CLOCK_DRIFT_MS = 500


def lock_key(table_key):
    return f"{table_key}/.hoodie/.locks/table_lock.json"


class JavaRulesLock:
    """One holder at a time of the lock of the table at `table_key` in `bucket` (boto3 client)."""

    def __init__(self, client, bucket, table_key, validity_ms=300_000):
        self.client, self.bucket, self.key, self.validity_ms = client, bucket, lock_key(table_key), validity_ms
        self.owner = self.etag = self.body = None

    def try_lock(self):
        """One attempt (Java's tryLock()): True when this contender holds the lock now."""
        from botocore.exceptions import ClientError
        try:
            current = self.client.get_object(Bucket=self.bucket, Key=self.key)
            data = json.loads(current["Body"].read())
            etag = current["ETag"]
        except ClientError as e:
            if e.response["Error"]["Code"] not in ("NoSuchKey", "404"):
                raise
            data = etag = None
        now = int(time.time() * 1000)
        if data is not None and not (data["expired"] or now > data["validUntil"] + CLOCK_DRIFT_MS):
            return False
        owner = str(uuid.uuid4())
        body = json.dumps({"expired": False, "validUntil": now + self.validity_ms, "owner": owner},
                          separators=(",", ":")).encode()
        condition = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
        try:
            put = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=body, **condition)
        except ClientError as e:
            if e.response["ResponseMetadata"]["HTTPStatusCode"] in (409, 412):
                return False
            raise
        self.owner, self.etag, self.body = owner, put["ETag"], json.loads(body)
        return True

    def unlock(self):
        """Java's unlock(): expired=true, validUntil unchanged, conditional on this holder's ETag."""
        from botocore.exceptions import ClientError
        body = json.dumps({**self.body, "expired": True}, separators=(",", ":")).encode()
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=body, IfMatch=self.etag)
        except ClientError as e:
            if e.response["ResponseMetadata"]["HTTPStatusCode"] != 412:  # taken over: not ours any more
                raise
        self.owner = self.etag = self.body = None
