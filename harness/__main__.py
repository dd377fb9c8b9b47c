import sys

from harness._entry import main

sys.exit(main())
