"""The steps of the Dapr Python SDK's distributed-lock example
(examples/distributed_lock/lock.py in dapr/python-sdk), against
`redquorum-serve`: a DaprClient with the SDK's defaults (it waits for
/v1.0/healthz/outbound on DAPR_HTTP_PORT, then calls gRPC on
DAPR_GRPC_PORT), a try-lock used as a context manager (unlocked at its
end), and an unlock of the lock already released.

Prints what it saw; exits non-zero on any surprise.
"""

import warnings

from dapr.clients import DaprClient
from dapr.clients.grpc._response import UnlockResponseStatus

STORE = 'lockstore'
RESOURCE = 'example-lock-resource'
OWNER = 'example-client-id'
EXPIRY = 60


def main():
    with DaprClient() as dapr:
        with dapr.try_lock(STORE, RESOURCE, OWNER, EXPIRY) as lock:
            assert lock.success, 'the lock was not granted'
            print('Lock acquired successfully!!!')
        again = dapr.unlock(STORE, RESOURCE, OWNER)
        print('unlock after the context: %s' % again.status)
        assert again.status == UnlockResponseStatus.lock_does_not_exist, again.status


if __name__ == '__main__':
    warnings.simplefilter('ignore')
    main()
