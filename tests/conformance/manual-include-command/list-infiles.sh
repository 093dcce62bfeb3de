#!/bin/bash
echo "transfer_input_files = `ls -m infiles/*.dat`"
