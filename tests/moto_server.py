"""moto's S3 server (`moto_server`) with conditional writes made atomic, as S3's are.

moto checks a PUT's or DELETE's If-Match / If-None-Match against the object and then writes it
as two steps of one request thread: two conditional PUTs made against one ETag can both pass the
check and both succeed, a thing S3 never does. Hudi's storage-based lock is taken by such PUTs,
so the lock tests saw two holders of it at once (one in an 8 x 1,000-round run). Here every
write of an object (PUT, POST — a multipart completion —, DELETE) runs under one lock; reads
stay concurrent."""

import re
import sys
import threading

from moto.s3.responses import S3Response
from moto.server import main

_WRITES = threading.Lock()


def _serialised(handler):
    def write(self, *args, **kwargs):
        with _WRITES:
            return handler(self, *args, **kwargs)
    return write


for _name in ("_key_response_put", "_key_response_post", "_key_response_delete"):
    setattr(S3Response, _name, _serialised(getattr(S3Response, _name)))

if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\.pyw|\.exe)?$", "", sys.argv[0])
    sys.exit(main())
