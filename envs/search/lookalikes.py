"""Look-alikes of Latin letters and digits from other scripts and symbol blocks, as code point:letter pairs.

Derived from Unicode's confusables data (TR39 ``confusables.txt``, as shipped in the
``confusable-homoglyphs`` 3.3.1 package): every non-ASCII character whose prototype is one ASCII
letter or digit, less those that compatibility decomposition without accents already reads as that
letter. :func:`sparring.envs.search.leaks.skeleton` reads it.
"""

from __future__ import annotations

__all__ = ["LOOKALIKES"]

_PAIRS = (
    "d7:x 131:i 17f:f 184:b 18d:g 196:l 1a6:r 1a7:2 1b7:3 1bc:5 1bd:s 1c0:l 21c:3 222:8 223:8 251:a "
    "261:g 263:y 269:i 26a:i 26f:w 28b:u 28f:y 2db:i 37a:i 37f:j 391:a 392:b 395:e 396:z 397:h 399:l "
    "39a:k 39c:m 39d:n 39f:o 3a1:p 3a4:t 3a5:y 3a7:x 3b1:a 3b3:y 3b9:i 3bd:v 3bf:o 3c1:p 3c3:o 3c5:u "
    "3d2:y 3dc:f 3e8:2 3f1:p 3f2:c 3f3:j 3f9:c 3fa:m 405:s 406:l 408:j 410:a 412:b 415:e 417:3 41a:k "
    "41c:m 41d:h 41e:o 420:p 421:c 422:t 423:y 425:x 42c:b 430:a 431:6 433:r 435:e 43e:o 440:p 441:c "
    "443:y 445:x 455:s 456:i 458:j 461:w 474:v 475:v 4ae:y 4af:y 4bb:h 4bd:e 4c0:l 4cf:i 4e0:3 501:d "
    "50c:g 51b:q 51c:w 51d:w 54d:u 54f:s 555:o 561:w 563:q 566:q 570:h 578:n 57c:n 57d:u 581:g 584:f "
    "585:o 6f1:l 6f5:o 6f7:v 966:o 9e6:o 9ea:8 9ed:9 a66:o a67:9 a6a:8 ae6:o b03:8 b20:o b66:o b68:9 "
    "be6:o c02:o c66:o c82:o ce6:o d02:o d20:o d66:o d6d:9 d82:o e50:o ed0:o 101d:o 1040:o 10e7:y "
    "10ff:o 1200:u 12d0:o 13a0:d 13a1:r 13a2:t 13a5:i 13a9:y 13aa:a 13ab:j 13ac:e 13b3:w 13b7:m "
    "13bb:h 13bd:y 13c0:g 13c2:h 13c3:z 13ce:4 13cf:b 13d2:r 13d4:w 13d5:s 13d9:v 13da:s 13de:l "
    "13df:c 13e2:p 13e6:k 13e7:d 13ee:6 13f3:g 13f4:b 142f:v 144c:u 146d:p 146f:d 1472:b 148d:j "
    "14aa:l 14bf:2 1541:x 157c:h 157d:x 1587:r 15af:b 15b4:f 15c5:a 15de:d 15ea:d 15f0:m 15f7:b "
    "166d:x 166e:x 16b7:x 16c1:l 16d5:k 16d6:m 1d04:c 1d0f:o 1d11:o 1d1c:u 1d20:v 1d21:w 1d22:z "
    "1d26:r 1d83:g 1d8c:y 1e9d:f 1eff:y 1fbe:i 2110:l 2111:l 212e:e 213d:y 2160:l 2223:l 2228:v "
    "222a:u 22a4:t 22c1:v 22c3:u 22ff:e 2373:i 2374:p 237a:a 23fd:l 2573:x 27d9:t 292b:x 292c:x "
    "2a2f:x 2c85:r 2c8e:h 2c92:l 2c94:k 2c98:m 2c9a:n 2c9e:o 2c9f:o 2ca2:p 2ca3:p 2ca4:c 2ca5:c "
    "2ca6:t 2ca8:y 2cac:x 2cca:9 2ccc:3 2cd0:l 2cd2:6 2d38:v 2d39:e 2d4f:l 2d54:o 2d55:q 2d5d:x "
    "3007:o a4d0:b a4d1:p a4d2:d a4d3:d a4d4:t a4d6:g a4d7:k a4d9:j a4da:c a4dc:z a4dd:f a4df:m "
    "a4e0:n a4e1:l a4e2:s a4e3:r a4e6:v a4e7:h a4ea:w a4eb:x a4ec:y a4ee:a a4f0:e a4f2:l a4f3:o "
    "a4f4:u a644:2 a647:i a6df:v a6ef:2 a731:s a75a:2 a76a:3 a76e:9 a798:f a799:f a79f:u a7ab:3 "
    "a7b2:j a7b3:x a7b4:b ab32:e ab35:f ab3d:o ab47:r ab48:r ab4e:u ab52:u ab5a:y ab75:i ab81:r "
    "ab83:w ab93:z aba9:v abaa:s abaf:c ff29:l ffe8:l 10282:b 10286:e 10287:f 1028a:l 10290:x 10292:o "
    "10295:p 10296:s 10297:t 102a0:a 102a1:b 102a2:c 102a5:f 102ab:o 102b0:m 102b1:t 102b2:y 102b4:x "
    "102cf:h 102f5:z 10301:b 10302:c 10309:l 10311:m 10315:t 10317:x 1031a:8 10320:l 10322:x 10404:o "
    "10415:c 1041b:l 10420:s 1042c:o 1043d:c 10448:s 104b4:r 104c2:o 104ce:u 104d2:7 104ea:o 104f6:u "
    "10513:n 10516:o 10518:k 1051c:c 1051d:v 10525:f 10526:l 10527:x 114d0:o 11706:v 1170a:w 1170e:w "
    "1170f:w 118a0:v 118a2:f 118a3:l 118a4:y 118a6:e 118a9:z 118ac:9 118ae:e 118af:4 118b2:l 118b5:o "
    "118b8:u 118bb:5 118bc:t 118c0:v 118c1:s 118c2:f 118c3:i 118c4:z 118c6:7 118c8:o 118ca:3 118cc:9 "
    "118d5:6 118d6:9 118d7:o 118d8:u 118dc:y 118e0:o 118e5:z 118e6:w 118e9:c 118ec:x 118ef:w 118f2:c "
    "16f08:v 16f0a:t 16f16:l 16f28:l 16f35:r 16f3a:s 16f3b:3 16f40:a 16f42:u 16f43:y 1d206:3 1d20d:v "
    "1d212:7 1d213:f 1d216:r 1d22a:l 1d408:l 1d43c:l 1d470:l 1d4d8:l 1d540:l 1d574:l 1d5a8:l 1d5dc:l "
    "1d610:l 1d644:l 1d678:l 1d6a4:i 1d6a8:a 1d6a9:b 1d6ac:e 1d6ad:z 1d6ae:h 1d6b0:l 1d6b1:k 1d6b3:m "
    "1d6b4:n 1d6b6:o 1d6b8:p 1d6bb:t 1d6bc:y 1d6be:x 1d6c2:a 1d6c4:y 1d6ca:i 1d6ce:v 1d6d0:o 1d6d2:p "
    "1d6d4:o 1d6d6:u 1d6e0:p 1d6e2:a 1d6e3:b 1d6e6:e 1d6e7:z 1d6e8:h 1d6ea:l 1d6eb:k 1d6ed:m 1d6ee:n "
    "1d6f0:o 1d6f2:p 1d6f5:t 1d6f6:y 1d6f8:x 1d6fc:a 1d6fe:y 1d704:i 1d708:v 1d70a:o 1d70c:p 1d70e:o "
    "1d710:u 1d71a:p 1d71c:a 1d71d:b 1d720:e 1d721:z 1d722:h 1d724:l 1d725:k 1d727:m 1d728:n 1d72a:o "
    "1d72c:p 1d72f:t 1d730:y 1d732:x 1d736:a 1d738:y 1d73e:i 1d742:v 1d744:o 1d746:p 1d748:o 1d74a:u "
    "1d754:p 1d756:a 1d757:b 1d75a:e 1d75b:z 1d75c:h 1d75e:l 1d75f:k 1d761:m 1d762:n 1d764:o 1d766:p "
    "1d769:t 1d76a:y 1d76c:x 1d770:a 1d772:y 1d778:i 1d77c:v 1d77e:o 1d780:p 1d782:o 1d784:u 1d78e:p "
    "1d790:a 1d791:b 1d794:e 1d795:z 1d796:h 1d798:l 1d799:k 1d79b:m 1d79c:n 1d79e:o 1d7a0:p 1d7a3:t "
    "1d7a4:y 1d7a6:x 1d7aa:a 1d7ac:y 1d7b2:i 1d7b6:v 1d7b8:o 1d7ba:p 1d7bc:o 1d7be:u 1d7c8:p 1d7ca:f "
    "1d7ce:o 1d7cf:l 1d7d8:o 1d7d9:l 1d7e2:o 1d7e3:l 1d7ec:o 1d7ed:l 1d7f6:o 1d7f7:l 1f74c:c 1f768:t "
    "1fbf0:o 1fbf1:l "
)

#: A non-ASCII character -> the ASCII letter (lower case) or digit it looks like.
LOOKALIKES: dict[str, str] = {
    chr(int(code, 16)): letter for code, letter in (pair.split(":") for pair in "".join(_PAIRS).split())
}
