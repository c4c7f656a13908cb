"""WSGI entry for Barbican's API in the local cloud.

Runs inside the OpenStack virtualenv (not nodeforge's): it must not import
nodeforge. Barbican's own entry loads a fixed /etc path; this one takes the
paste file from NODEFORGE_BARBICAN_PASTE (the config itself is found through
$HOME/.barbican/barbican.conf, oslo.config's search path).
"""

import os

from paste import deploy

application = deploy.loadapp("config:" + os.environ["NODEFORGE_BARBICAN_PASTE"])
