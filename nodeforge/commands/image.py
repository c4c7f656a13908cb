"""``nodeforge image``: node images, from build to the approved catalog."""

from __future__ import annotations

import click

from nodeforge.commands import image_build, image_canary, image_provenance, image_publish, image_verify
from nodeforge.commands import image_diff, image_ramdisk


@click.group()
def image():
    """Node images: publish to Glance, sign, promote, list."""


for _command in (image_build.COMMANDS + image_verify.COMMANDS + image_canary.COMMANDS + image_publish.COMMANDS
                 + image_provenance.COMMANDS):
    image.add_command(_command)
for _command in image_diff.COMMANDS + image_ramdisk.COMMANDS:
    image.add_command(_command)
