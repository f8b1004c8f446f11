"""The numbers the command line's parser shows (--help, defaults) and the recipient prefix its
messages keep visible, in a module that imports nothing, so that ``gcmstream --help`` and
``--version`` load no cryptography. ``format`` and ``recipients`` re-export them: this is their
one copy."""

# 64 KiB: from this size up, the ~2 us of Python per record vanishes next to AES-GCM and the
# copy a socket makes anyway; smaller records lose up to 4x (benchmarks/README.md), larger
# ones quadruple a connection's ring (256 KiB here). age and DARE use 64 KiB; TLS 16 KiB.
DEFAULT_RECORD_SIZE = 64 * 1024
# A reader accepts records up to 1 MiB unless told otherwise: larger records only cost memory.
DEFAULT_MAX_RECORD_SIZE = 1024 * 1024
# Hard cap on the record size field, as gRPC ALTS caps frames at 16 MiB.
HARD_MAX_RECORD_SIZE = 16 * 1024 * 1024
# Context is never sent; it only feeds HKDF (hashed). Bounded so it cannot be a memory lever.
MAX_CONTEXT_SIZE = 64 * 1024
# scrypt's default log2 N (recipients.py says how it was measured).
DEFAULT_WORK_FACTOR = 18
# The prefix of a recipient line (docs/FORMAT.md 4.5).
RECIPIENT_PREFIX = "gcmstream-recipient-v1"
# The prefix of an identity line (docs/FORMAT.md 4.5): here so that keyfile.py can tell an
# identity file given where a key file goes without importing recipients.py.
IDENTITY_PREFIX = "gcmstream-identity-v1"
