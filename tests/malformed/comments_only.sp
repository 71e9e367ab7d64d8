# just a comment

import tvm
from tvm.script import tir as T
