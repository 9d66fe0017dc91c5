"""The Dapr Python SDK against `redquorum-serve`, beyond the example:
contention between two owners, every unlock status, an expiry, bad input.
RESOURCE_PREFIX (argv[1]) keeps each run's resources apart.

Exits non-zero on the first surprise, naming it.
"""

import sys
import time
import warnings

import grpc
from dapr.clients import DaprClient
from dapr.clients.grpc._response import UnlockResponseStatus as Status

STORE = 'lockstore'


def main(prefix):
    with DaprClient() as dapr:
        job = prefix + ':job'
        assert dapr.try_lock(STORE, job, 'alice', 30).success, 'alice first'
        assert not dapr.try_lock(STORE, job, 'bob', 30).success, 'bob while alice holds'
        assert not dapr.try_lock(STORE, job, 'alice', 30).success, 'alice again (Dapr refuses)'
        assert dapr.unlock(STORE, job, 'bob').status == Status.lock_belongs_to_others
        assert dapr.unlock(STORE, job, 'alice').status == Status.success
        assert dapr.unlock(STORE, job, 'alice').status == Status.lock_does_not_exist
        assert dapr.try_lock(STORE, job, 'bob', 30).success, 'bob once free'
        assert dapr.unlock(STORE, job, 'bob').status == Status.success

        # An expiry of 1 s: free within a few seconds without an unlock.
        short = prefix + ':short'
        assert dapr.try_lock(STORE, short, 'alice', 1).success
        start = time.monotonic()
        while not dapr.try_lock(STORE, short, 'bob', 5).success:
            assert time.monotonic() - start < 10, 'a 1 s lock still held after 10 s'
            time.sleep(0.1)
        took = time.monotonic() - start
        assert took >= 0.5, 'a 1 s lock taken over after %.2f s' % took
        assert dapr.unlock(STORE, short, 'alice').status == Status.lock_belongs_to_others
        assert dapr.unlock(STORE, short, 'bob').status == Status.success

        # Bad input the SDK lets through: the service's INVALID_ARGUMENT.
        for store, expiry, what in [('nope', 10, 'unknown store'), (STORE, 100000, 'expiry above max_ttl')]:
            try:
                dapr.try_lock(store, prefix + ':bad', 'alice', expiry)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (what, e.code())
            else:
                raise AssertionError('%s was accepted' % what)
    print('sdk checks passed; a 1 s lock was taken over after %.2f s' % took)


if __name__ == '__main__':
    warnings.simplefilter('ignore')
    main(sys.argv[1])
