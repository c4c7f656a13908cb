"""Verify: boot each built image under QEMU and check it from inside.

The boot test (:mod:`.boottest`), the checks run in the guest
(:mod:`.verifychecks`, :mod:`.verify_guest`) and the signed-off report
the publish stage requires (:mod:`.verifyreport`).
"""
