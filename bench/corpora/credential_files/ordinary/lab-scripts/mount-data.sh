#!/bin/sh
# Mount the lab share; the password comes from the environment (set by `gpu secrets`)
set -eu
sudo mount -t cifs //files.lab.example/data /mnt/data \
    -o username="$SMB_USER",password="$SMB_PASSWORD",vers=3.0
