#!/bin/sh
echo ran
